package riftflow

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/store"
)

// defaultAPIAddr is where `riftflow up` serves the API without
// --http-addr or HTTP_ADDR: loopback only.
const defaultAPIAddr = "127.0.0.1:8080"

// apiAddr is the API's listen address: flag, else env (HTTP_ADDR), else
// defaultAPIAddr. An address beyond loopback (":8080", "0.0.0.0:8080", a
// LAN address) is an error unless expose is set.
func apiAddr(flagAddr, envAddr string, expose bool) (string, error) {
	addr := flagAddr
	if addr == "" {
		addr = envAddr
	}
	if addr == "" {
		addr = defaultAPIAddr
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("invalid API address %q: %w", addr, err)
	}
	if !isLoopback(addr) && !expose {
		return "", fmt.Errorf("the API address %s listens beyond loopback: pass --expose to serve it on other interfaces "+
			"(it is authenticated but not encrypted; see docs/security.md), or use 127.0.0.1", addr)
	}
	return addr, nil
}

func localUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "local"
}

// localToken revokes the token an earlier `riftflow up` made for the
// local user and makes a new admin token, written to .data/api.token
// (mode 0600) for local tools.
func localToken(ctx context.Context, st *Stack) (string, error) {
	ts := NewTokens(st.Infra.Store)
	name := "riftflow up: " + localUser()
	if _, err := ts.RevokeName(ctx, name); err != nil {
		return "", err
	}
	token, _, err := ts.Create(ctx, name, []Scope{ScopeAdmin})
	if err != nil {
		return "", err
	}
	writeFile(dataDir(), "api.token", token)
	return token, nil
}

// cmdToken is `riftflow token create|list|revoke` (DATABASE_URL, or the
// database of a local `riftflow up`).
func cmdToken(ctx context.Context, args []string, out io.Writer) error {
	const usage = "usage: riftflow token create --name N --scopes read[,sync,admin] | list [--json] | revoke ID"
	if len(args) == 0 {
		return errors.New(usage)
	}
	env, err := app.LoadEnv()
	if err != nil {
		return err
	}
	url, err := dbURL(env)
	if err != nil {
		return err
	}
	open := func() (*Tokens, func(), error) {
		st, err := store.Open(ctx, url)
		if err != nil {
			return nil, nil, err
		}
		return NewTokens(st), st.Close, nil
	}
	switch args[0] {
	case "create":
		fs := flag.NewFlagSet("token create", flag.ContinueOnError)
		name := fs.String("name", "", "who or what holds the token (required)")
		scopes := fs.String("scopes", string(ScopeRead), "comma-separated: read (GET), sync (start syncs; includes read), admin (everything)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		sc, err := ParseScopes(*scopes)
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
			t.ID, t.Name, strings.Join(scopeStrings(t.Scopes), ","), token)
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
		if *asJSON {
			return json.NewEncoder(out).Encode(list)
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, strings.Join(scopeStrings(t.Scopes), ","),
				fmtTime(t.CreatedAt), used, revoked)
		}
		return tw.Flush()
	case "revoke":
		if len(args) != 2 {
			return errors.New(usage)
		}
		id := strings.TrimPrefix(args[1], tokenPrefix)
		if m := tokenRe.FindStringSubmatch(args[1]); m != nil {
			id = m[1] // the whole token was given
		}
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
