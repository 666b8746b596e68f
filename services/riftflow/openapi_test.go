package riftflow

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/riftflow/riftflow/pkg/app"
)

// TestOpenAPIPathParameters: every wildcard of a route is a documented
// path parameter of its operation in openapi.json, and no other path
// parameter is documented. (TestOpenAPIMatchesRoutes checks the routes,
// TestEveryErrorIsProblemJSON the error answers.)
func TestOpenAPIPathParameters(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct{ Name, In string } `json:"parameters"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatal(err)
	}
	wild := regexp.MustCompile(`\{([a-z_]+)\}`)
	for _, rt := range NewAPI(&app.Infra{}).routeTable() {
		method, path, _ := strings.Cut(rt.pattern, " ")
		var want, got []string
		for _, m := range wild.FindAllStringSubmatch(path, -1) {
			want = append(want, m[1])
		}
		for _, p := range doc.Paths[path][strings.ToLower(method)].Parameters {
			if p.In == "path" {
				got = append(got, p.Name)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(want, got) {
			t.Errorf("%s: openapi.json path parameters %v, the route's wildcards %v", rt.pattern, got, want)
		}
	}
}

// TestDesignsTableNamesRealTests: every test docs/designs.md names as
// keeping a promise exists (a func Test… in some _test.go of the repo).
func TestDesignsTableNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile("../../docs/designs.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "../.." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range decl.FindAllSubmatch(b, -1) {
				defined[string(m[1])] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`(Test[A-Za-z0-9_]+)`").FindAllSubmatch(doc, -1)
	if len(named) < 20 {
		t.Fatalf("docs/designs.md names %d tests; its table is missing", len(named))
	}
	for _, m := range named {
		if !defined[string(m[1])] {
			t.Errorf("docs/designs.md names %s, which no _test.go defines", m[1])
		}
	}
}
