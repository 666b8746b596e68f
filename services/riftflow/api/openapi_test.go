package api

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestOpenAPIMatchesRoutes: /openapi.json documents exactly the routes
// the API serves (method and path), no more, no fewer.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	served := map[string]bool{}
	for _, rt := range New(nil, nil).routeTable() {
		served[rt.pattern] = true
		if !documented[rt.pattern] {
			t.Errorf("route %s is not in openapi.json", rt.pattern)
		}
	}
	for op := range documented {
		if !served[op] {
			t.Errorf("openapi.json documents %s, which no route serves", op)
		}
	}
}

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
	for _, rt := range New(nil, nil).routeTable() {
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
