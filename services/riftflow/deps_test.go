package riftflow

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/riftflow/riftflow/internal/testenv"
)

// Development tooling that production binaries must not link.
const (
	natsServerPkg = "github.com/nats-io/nats-server/v2/server"
	simPkg        = "github.com/riftflow/riftflow/internal/sim"
	testingPkg    = "testing"
)

// linkedPackages lists every package the main package at dir (relative to
// the repository root) links, via `go list -deps` in the go.work workspace.
func linkedPackages(t *testing.T, dir string) []string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./"+dir)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps ./%s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatalf("go list -deps ./%s: %v", dir, err)
	}
	return strings.Fields(string(out))
}

// TestBinariesLinkNoDevelopmentTooling: the five service binaries link
// neither the embedded nats-server, the Riot simulator nor package testing,
// and the riftflow CLI (which embeds nats-server and the simulator for
// `riftflow up`) links no testing.
func TestBinariesLinkNoDevelopmentTooling(t *testing.T) {
	testenv.SkipShort(t, "runs go list over the workspace")
	binaries := map[string][]string{"services/riftflow/cmd/riftflow": {testingPkg}}
	for _, s := range []string{"resolver", "matchid-lister", "match-fetcher", "persister", "retry-sweeper"} {
		binaries["services/"+s+"/cmd/"+s] = []string{natsServerPkg, simPkg, testingPkg}
	}
	for dir, banned := range binaries {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			deps := linkedPackages(t, dir)
			if !slices.Contains(deps, "github.com/riftflow/riftflow/pkg/app") {
				t.Fatalf("go list -deps ./%s does not list pkg/app; is the listing complete? %d packages", dir, len(deps))
			}
			for _, b := range banned {
				if slices.Contains(deps, b) {
					t.Errorf("%s links %s", dir, b)
				}
			}
		})
	}
}
