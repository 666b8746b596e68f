package riftflow

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/riftflow/api"
)

// cmdToken is `riftflow token create|list|revoke` (DATABASE_URL, or the
// database of a local `riftflow up`).
func cmdToken(ctx context.Context, args []string, out io.Writer) error {
	const usage = "usage: riftflow token create --name N --scopes read[,sync,admin] | list [--json] | revoke ID"
	if len(args) == 0 {
		return errors.New(usage)
	}
	_, url, err := loadDB()
	if err != nil {
		return err
	}
	open := func() (*api.Tokens, func(), error) {
		st, err := store.Open(ctx, url)
		if err != nil {
			return nil, nil, err
		}
		return api.NewTokens(st), st.Close, nil
	}
	switch args[0] {
	case "create":
		fs := flag.NewFlagSet("token create", flag.ContinueOnError)
		name := fs.String("name", "", "who or what holds the token (required)")
		scopes := fs.String("scopes", string(api.ScopeRead), "comma-separated: read (GET), sync (start syncs; includes read), admin (everything)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		sc, err := api.ParseScopes(*scopes)
		if err != nil {
			return err
		}
		ts, closeDB, err := open()
		if err != nil {
			return err
		}
		defer closeDB()
		token, t, err := ts.Create(ctx, *name, sc)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "token %s for %q, scopes %s (shown once; only its SHA-256 is stored):\n%s\n",
			t.ID, t.Name, strings.Join(api.ScopeStrings(t.Scopes), ","), token)
		return nil
	case "list":
		fs := flag.NewFlagSet("token list", flag.ContinueOnError)
		asJSON := fs.Bool("json", false, "print JSON")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		ts, closeDB, err := open()
		if err != nil {
			return err
		}
		defer closeDB()
		list, err := ts.List(ctx)
		if err != nil {
			return err
		}
		return printAs(out, *asJSON, list, func() error {
			tw := newTable(out)
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
	case "revoke":
		if len(args) != 2 {
			return errors.New(usage)
		}
		id := api.TokenID(args[1]) // an id, or the whole token
		ts, closeDB, err := open()
		if err != nil {
			return err
		}
		defer closeDB()
		if err := ts.Revoke(ctx, id); errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("no live token %s (see `riftflow token list`)", id)
		} else if err != nil {
			return err
		}
		fmt.Fprintf(out, "token %s revoked\n", id)
		return nil
	}
	return errors.New(usage)
}
