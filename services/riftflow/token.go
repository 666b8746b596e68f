package riftflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/riftflow/api"
)

// cmdToken is `riftflow token create|list|revoke` (DATABASE_URL, or the
// database of a local `riftflow up`).
func cmdToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "usage: riftflow token create --name N --scopes read[,sync,admin] | list [--json] | revoke ID"
	if len(args) == 0 {
		return errors.New(usage)
	}
	c := tokenCmd{out: stdout, stderr: stderr}
	switch args[0] {
	case "create":
		return c.create(ctx, args[1:])
	case "list":
		return c.list(ctx, args[1:])
	case "revoke":
		if len(args) != 2 {
			return errors.New(usage)
		}
		return c.revoke(ctx, api.TokenID(args[1])) // an id, or the whole token
	}
	return errors.New(usage)
}

// tokenCmd is one run of `riftflow token`: where it writes. Each
// subcommand opens the database (open) once its arguments are valid, and
// closes it when done.
type tokenCmd struct{ out, stderr io.Writer }

func (c tokenCmd) open(ctx context.Context) (*api.Tokens, func(), error) {
	_, url, err := loadDB()
	if err != nil {
		return nil, nil, err
	}
	st, err := store.Open(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	return api.NewTokens(st), st.Close, nil
}

// create is `riftflow token create --name N --scopes S`: the token is
// printed once; only its SHA-256 is stored.
func (c tokenCmd) create(ctx context.Context, args []string) error {
	fs := newFlags("token create", c.stderr)
	name := fs.String("name", "", "who or what holds the token (required)")
	scopes := fs.String("scopes", string(api.ScopeRead), "comma-separated: read (GET), sync (start syncs; includes read), admin (everything)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sc, err := api.ParseScopes(*scopes)
	if err != nil {
		return err
	}
	ts, closeDB, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	token, t, err := ts.Create(ctx, *name, sc)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "token %s for %q, scopes %s (shown once; only its SHA-256 is stored):\n%s\n",
		t.ID, t.Name, strings.Join(api.ScopeStrings(t.Scopes), ","), token)
	return nil
}

// list is `riftflow token list [--json]`: every token, revoked ones too.
func (c tokenCmd) list(ctx context.Context, args []string) error {
	fs := newFlags("token list", c.stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ts, closeDB, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	list, err := ts.List(ctx)
	if err != nil {
		return err
	}
	return printAs(c.out, *asJSON, list, func() error {
		tw := newTable(c.out)
		fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tCREATED\tLAST USED\tREVOKED")
		for _, t := range list {
			revoked := "-"
			if t.RevokedAt != nil {
				revoked = fmtTime(*t.RevokedAt)
			}
			used := "never"
			if t.LastUsedAt != nil {
				used = fmtTime(*t.LastUsedAt)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, strings.Join(api.ScopeStrings(t.Scopes), ","),
				fmtTime(t.CreatedAt), used, revoked)
		}
		return tw.Flush()
	})
}

// revoke is `riftflow token revoke ID`; an unknown or already revoked id
// is an error that says where to look.
func (c tokenCmd) revoke(ctx context.Context, id string) error {
	ts, closeDB, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := ts.Revoke(ctx, id); errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no live token %s (see `riftflow token list`)", id)
	} else if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "token %s revoked\n", id)
	return nil
}
