package riftflow

import (
	"bytes"
	"strings"
	"testing"
)

// TestCommandTable: every command's usage lines name it, `riftflow help`
// prints them all in the table's order, `--version` is version's alias,
// and a name the table lacks is refused with the usage.
func TestCommandTable(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"help"}, &out, &errOut); code != 0 {
		t.Fatalf("help: exit %d %s", code, errOut.String())
	}
	help, at := out.String(), 0
	for _, c := range commands {
		if !strings.HasPrefix(c.help, "  riftflow "+c.names[0]+" ") {
			t.Errorf("command %q: usage lines %q do not name it", c.names[0], c.help)
		}
		i := strings.Index(help[at:], c.help)
		if i < 0 {
			t.Errorf("command %q: its usage lines are not in the help after the previous command's", c.names[0])
			continue
		}
		at += i + len(c.help)
	}
	out.Reset()
	if code := Main([]string{"--version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "riftflow ") {
		t.Errorf("--version: exit %d %q", code, out.String())
	}
	out.Reset()
	errOut.Reset()
	if code := Main([]string{"no-such-command"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), `unknown command "no-such-command"`) || !strings.Contains(errOut.String(), "Usage:") {
		t.Errorf("an unknown command: exit %d %q", code, errOut.String())
	}
}

// TestFlagErrorsOnTheInvocationsStderr: every command that takes flags
// reports a flag it does not know, with its flags' usage, on the
// invocation's stderr, beside the error Run prints, not on the process's
// os.Stderr; nothing reaches stdout, and the exit code is 1. Its -h
// prints the usage there alone and exits 0.
func TestFlagErrorsOnTheInvocationsStderr(t *testing.T) {
	for _, argv := range [][]string{
		{"up"}, {"token", "create"}, {"token", "list"}, {"ingest"}, {"status"}, {"retry"}, {"show"},
		{"forget"}, {"rotate-key"}, {"clear-key-rejection"}, {"pause"}, {"sim"},
	} {
		name := strings.Join(argv, " ")
		var out, errOut bytes.Buffer
		code := Run(t.Context(), Invocation{Args: append(argv, "--no-such-flag"), Stdout: &out, Stderr: &errOut})
		if code != 1 || out.Len() != 0 ||
			!strings.Contains(errOut.String(), "Usage of "+name+":") ||
			!strings.Contains(errOut.String(), "riftflow "+argv[0]+": flag provided but not defined: -no-such-flag") {
			t.Errorf("riftflow %s --no-such-flag: exit %d, stdout %q, stderr %q; want 1, nothing, the flags' usage and the error",
				name, code, out.String(), errOut.String())
		}
		out.Reset()
		errOut.Reset()
		code = Run(t.Context(), Invocation{Args: append(argv[:len(argv):len(argv)], "-h"), Stdout: &out, Stderr: &errOut})
		if code != 0 || out.Len() != 0 || !strings.HasPrefix(errOut.String(), "Usage of "+name+":") || strings.Contains(errOut.String(), "riftflow "+argv[0]+":") {
			t.Errorf("riftflow %s -h: exit %d, stdout %q, stderr %q; want 0, nothing, only the flags' usage", name, code, out.String(), errOut.String())
		}
	}
}
