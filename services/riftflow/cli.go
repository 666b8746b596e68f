// Package riftflow is the riftflow CLI: `riftflow up` runs the whole
// pipeline in one process (package stack) with the HTTP API (package
// api); `ingest`, `status`, `migrate`, `streams apply` and `sim` are the
// operator's tools.
package riftflow

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/telemetry"
)

// usageHead and usageTail frame the commands' lines in the usage.
const usageHead = `riftflow keeps a Postgres database filled with League of Legends data from the Riot API.

Usage:
`

const usageTail = `
Configuration comes from the environment; see README.md and docs/security.md.
Without NATS_URL or RIOT_API_KEY, 'up' starts its own embedded NATS and the
simulator (with DATABASE_URL, only given --simulator or --demo); without
DATABASE_URL it needs --ephemeral-db for a throwaway Postgres. The other commands find them through .data/.
`

// command is one CLI command: the words that name it (the first argument),
// its lines of the usage, and what runs it with the arguments after its
// name.
type command struct {
	names []string
	help  string
	run   func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is every command, in the order of the usage (each file of
// this package holds a command or a group of them: up.go, ingest.go,
// status.go, admin.go, token.go, show.go, serve.go, setup.go, sim.go).
var commands = []command{
	{[]string{"up"}, `  riftflow up [--demo] [--ephemeral-db] [--simulator] [--http-addr 127.0.0.1:8080] [--expose]
                                run the whole pipeline in one process (until Ctrl-C;
                                --demo ingests the recorded demo player, prints a summary, exits);
                                prints an admin API token; the API listens on loopback unless --expose
`,
		cmdUp},
	{[]string{"token"}, `  riftflow token create --name N --scopes read,sync   a bearer token for the HTTP API (shown once)
  riftflow token list [--json]                       tokens (never the secret), scopes, last use
  riftflow token revoke ID                           revoke a token at once
`,
		cmdToken},
	{[]string{"ingest"}, `  riftflow ingest --riot-id 'Name#TAG' | --puuid P  [--platform na1] [--mode latest|full]
                  [--count N] [--lookback-days D] [--queue Q] [--type ranked] [--force]
                  [--requested-by NAME] [--wait]
`,
		cmdIngest},
	{[]string{"status"}, `  riftflow status --riot-id 'Name#TAG' | --puuid P   account sync state (pending: queued, with its place), counts
  riftflow status --failures                         fetch failures by status, with reasons
  riftflow status --jobs [--job-type T]              the job log, newest first (pending ones with their place)
  riftflow status --schedules                        each scheduled job's last run and next run
  riftflow status --ratelimit                        Riot rate-limit budgets, 429s, waits, key rejected
`,
		cmdStatus},
	{[]string{"migrate"}, `  riftflow migrate                                   apply the SQL migrations (DATABASE_URL)
`,
		func(ctx context.Context, _ []string, _, stderr io.Writer) error { return cmdMigrate(ctx, stderr) }},
	{[]string{"streams"}, `  riftflow streams apply                             create/update streams, consumers, KV buckets (NATS_URL)
`,
		cmdStreams},
	{[]string{"retry"}, `  riftflow retry --match-id ID[,ID] | --puuid P | --all [--dead] [--limit 100]
                                                     replay permanently unfetchable matches (and, with
                                                     --dead, the dead letters naming them), 100 per run
  riftflow retry --dead [--stream S] [--match TEXT] [--limit 100]
                                                     replay dead letters to their original subjects
`,
		cmdRetry},
	{[]string{"serve"}, `  riftflow serve                                     the HTTP API alone (/v1/..., SSE, /healthz, /metrics)
                                                     over NATS_URL and DATABASE_URL, for a Deployment
`,
		func(ctx context.Context, _ []string, _, stderr io.Writer) error { return cmdServe(ctx, stderr) }},
	{[]string{"show"}, `  riftflow show --match ID [--timeline] | --puuid P [--ranks | --reports] [--limit N] [--cursor C]
                                                     what the read API serves, from Postgres
`,
		cmdShow},
	{[]string{"forget"}, `  riftflow forget --puuid P                          erase a player: rows, cursors, cache; keeps
                                                     matches other stored accounts played in
`,
		cmdForget},
	{[]string{"rotate-key"}, `  riftflow rotate-key [--dry-run]                    after changing RIOT_API_KEY (paused): re-resolve
                                                     every account, rewrite PUUIDs in one transaction
`,
		cmdRotateKey},
	{[]string{"clear-key-rejection"}, `  riftflow clear-key-rejection [--key-id ID]         resume every process after a key rejection
                                                     (else each probes Riot with one call, 1m..30m apart)
`,
		cmdClearKeyRejection},
	{[]string{"pause"}, `  riftflow pause [--off] [--reason TEXT]             the pause switch: every service stops pulling
                                                     work (and the API answers 503) until --off
`,
		cmdPause},
	{[]string{"sim"}, `  riftflow sim [--addr 127.0.0.1:8099] [--key K] [--expose]  serve the Riot API simulator
`,
		cmdSim},
	{[]string{"version", "--version"}, `  riftflow version                                   print the stamped version
`,
		cmdVersion},
}

// usage is the help text: every command's lines, in the table's order.
func usage() string {
	var b strings.Builder
	b.WriteString(usageHead)
	for _, c := range commands {
		b.WriteString(c.help)
	}
	b.WriteString(usageTail)
	return b.String()
}

// lookup is the command named name, or nil.
func lookup(name string) *command {
	for i := range commands {
		if slices.Contains(commands[i].names, name) {
			return &commands[i]
		}
	}
	return nil
}

// Invocation is one run of the CLI: its arguments (without the program
// name) and where it writes.
type Invocation struct {
	Args           []string
	Stdout, Stderr io.Writer
}

// Main runs the CLI with args (without the program name) under a context
// cancelled on SIGINT/SIGTERM, and returns the process exit code (Run).
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, Invocation{Args: args, Stdout: stdout, Stderr: stderr})
}

// Run runs the command inv.Args names until it is done or ctx ends, and
// returns the process exit code: 0 (also for a command's -h, whose usage
// its flags print on inv.Stderr), or 1 with the (redacted) error on
// inv.Stderr.
func Run(ctx context.Context, inv Invocation) int {
	args, stdout, stderr := inv.Args, inv.Stdout, inv.Stderr
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage())
		return 0
	}
	var err error
	if c := lookup(args[0]); c != nil {
		err = c.run(ctx, args[1:], stdout, stderr)
	} else {
		err = fmt.Errorf("unknown command %q\n\n%s", args[0], usage())
	}
	switch {
	case errors.Is(err, flag.ErrHelp): // -h: the command's flags printed their usage
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "riftflow %s: %s\n", args[0], redact.String(err.Error()))
		return 1
	}
	return 0
}

// newFlags is the flag set of the command called name: it reports parse
// errors, and prints its usage for -h, on the invocation's stderr (never
// os.Stderr), where Run writes the command's error.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// cmdVersion prints the stamped version.
func cmdVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	fmt.Fprintln(stdout, "riftflow", telemetry.ReadBuildInfo())
	return nil
}
