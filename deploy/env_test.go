package deploy_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// envRead finds the variables Go code reads: `env:"NAME"` struct tags
// (caarlos0/env, pkg/config) and os.Getenv/os.LookupEnv("NAME") calls.
var envRead = regexp.MustCompile(`env:"([A-Z][A-Z0-9_]*)"|os\.(?:Getenv|LookupEnv)\("([A-Z][A-Z0-9_]*)"\)`)

// documentedVar is a variable named in a table row of docs/configuration.md.
var documentedVar = regexp.MustCompile("`([A-Z][A-Z0-9_]*)`")

// TestEveryEnvVarDocumented fails when code in any module of the
// repository (tests excepted) reads an environment variable, or a rendered
// ConfigMap sets one, that docs/configuration.md does not list.
func TestEveryEnvVarDocumented(t *testing.T) {
	raw, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
		for _, m := range documentedVar.FindAllStringSubmatch(first, -1) {
			documented[m[1]] = true
		}
	}
	if len(documented) < 40 {
		t.Fatalf("docs/configuration.md lists %d variables; the table was not found", len(documented))
	}

	read := map[string][]string{} // variable -> files
	for _, dir := range []string{"pkg", "services", "streams", "migrations", "deploy"} {
		err := filepath.WalkDir(filepath.Join("..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range envRead.FindAllStringSubmatch(string(src), -1) {
				name := m[1] + m[2]
				read[name] = append(read[name], strings.TrimPrefix(path, "../"))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(read) < 40 {
		t.Fatalf("found only %d variables in the code; the scan is broken", len(read))
	}
	var missing []string
	for name, files := range read {
		if !documented[name] {
			missing = append(missing, name+" (read in "+strings.Join(files, ", ")+")")
		}
	}
	for _, dir := range kustomizations {
		r := render(t, dir)
		for cmName, cm := range r.configMaps {
			if cm.Labels["grafana_dashboard"] != "" {
				continue
			}
			for k := range cm.Data {
				if !documented[k] && !strings.HasPrefix(k, "POSTGRES_") {
					missing = append(missing, k+" (set by "+dir+" ConfigMap "+cmName+")")
				}
			}
		}
	}
	sort.Strings(missing)
	missing = compactStrings(missing)
	for _, m := range missing {
		t.Errorf("environment variable %s is not in docs/configuration.md", m)
	}
}

func compactStrings(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
