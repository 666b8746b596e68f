package streams

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestArchitectureDiagram keeps docs/architecture.md's Mermaid diagram and
// the declarations in step: every stream (S_<NAME> node), KV bucket
// (KV_<bucket>), object store (OS_<bucket>) and stream subject the diagram
// names is declared, and every declared one is in the diagram.
func TestArchitectureDiagram(t *testing.T) {
	diagram := mermaidBlock(t, "../docs/architecture.md")
	set := loadSet(t, Options{})
	var streams, subjects, buckets, objects []string
	for _, s := range set.Streams {
		streams = append(streams, s.Name)
		subjects = append(subjects, s.Subjects...)
	}
	for _, b := range set.Buckets {
		buckets = append(buckets, b.Bucket)
	}
	for _, o := range set.Objects {
		objects = append(objects, o.Bucket)
	}

	nodes := func(prefix string) []string {
		re := regexp.MustCompile(`\b` + prefix + `_([A-Za-z0-9-]+)[\[({]`)
		var out []string
		for _, m := range re.FindAllStringSubmatch(diagram, -1) {
			if !slices.Contains(out, m[1]) {
				out = append(out, m[1])
			}
		}
		return out
	}
	same := func(what string, declared, drawn []string) {
		for _, d := range declared {
			if !slices.Contains(drawn, d) {
				t.Errorf("%s %q is declared in streams/ but not in docs/architecture.md", what, d)
			}
		}
		for _, d := range drawn {
			if !slices.Contains(declared, d) {
				t.Errorf("%s %q is in docs/architecture.md but streams/ does not declare it", what, d)
			}
		}
	}
	same("stream", streams, nodes("S"))
	same("KV bucket", buckets, nodes("KV"))
	same("object store", objects, nodes("OS"))

	subjectRe := regexp.MustCompile(`(?:lol|\$JS)\.[A-Za-z0-9_.>*-]+`)
	var drawn []string
	for _, m := range subjectRe.FindAllString(diagram, -1) {
		if !slices.Contains(drawn, m) {
			drawn = append(drawn, m)
		}
	}
	same("subject", subjects, drawn)
}

// mermaidBlock is the first Mermaid block of the Markdown file at path,
// with "&gt;" read as ">".
func mermaidBlock(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(raw), "```mermaid")
	if !ok {
		t.Fatalf("%s has no mermaid block", path)
	}
	block, _, ok := strings.Cut(body, "```")
	if !ok {
		t.Fatalf("%s: the mermaid block is not closed", path)
	}
	return strings.ReplaceAll(block, "&gt;", ">")
}
