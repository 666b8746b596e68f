package deploy_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/yannh/kubeconform/pkg/resource"
	"github.com/yannh/kubeconform/pkg/validator"
	"sigs.k8s.io/yaml"
)

// schemaLocation is kubeconform's template for the committed schemas
// (written by internal/schemagen): "schemas/deployment-apps-v1.json".
const schemaLocation = "schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json"

// newSchemaValidator returns kubeconform's validator over schemas/ only:
// strict (undocumented fields fail) and failing on a missing schema. It
// never reaches the network.
func newSchemaValidator(t *testing.T) validator.Validator {
	t.Helper()
	v, err := validator.New([]string{schemaLocation}, validator.Opts{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// gvk returns a document's "apiVersion/Kind" and name.
func gvk(t *testing.T, doc []byte) (key, name string) {
	t.Helper()
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		t.Fatal(err)
	}
	return head.APIVersion + "/" + head.Kind, head.Metadata.Name
}

// validate runs v on one document and returns the result, labelled path.
func validate(v validator.Validator, path string, doc []byte) validator.Result {
	return v.ValidateResource(resource.Resource{Path: path, Bytes: doc})
}

// describe renders a result's errors on one line each.
func describe(res validator.Result) string {
	var b strings.Builder
	if res.Err != nil {
		b.WriteString(res.Err.Error())
	}
	for _, e := range res.ValidationErrors {
		b.WriteString("\n  " + e.Path + ": " + e.Msg)
	}
	return b.String()
}

// TestRenderedSchemas validates every document of base and of every
// overlay against the JSON schemas in schemas/ with kubeconform: required
// fields, types, enums, patterns and (strict) unknown fields, offline.
func TestRenderedSchemas(t *testing.T) {
	overlays, err := filepath.Glob("overlays/*")
	if err != nil || len(overlays) == 0 {
		t.Fatalf("no overlays: %v", err)
	}
	v := newSchemaValidator(t)
	for _, dir := range append([]string{"base"}, overlays...) {
		t.Run(dir, func(t *testing.T) {
			r := render(t, dir)
			checked := 0
			for _, doc := range r.docs {
				key, name := gvk(t, doc)
				res := validate(v, dir+": "+key+" "+name, doc)
				if res.Status != validator.Valid {
					t.Errorf("%s: %s %s: %s", dir, key, name, describe(res))
				}
				checked++
			}
			if checked == 0 {
				t.Fatalf("%s: no document validated", dir)
			}
			t.Logf("%s: %d of %d documents valid against schemas/", dir, checked, len(r.docs))
		})
	}
}

// TestSchemaRejects proves the schemas bite: each case breaks one rendered
// prod document in one way and expects kubeconform to reject it, naming
// the broken field.
func TestSchemaRejects(t *testing.T) {
	r := render(t, "overlays/prod")
	v := newSchemaValidator(t)
	byKind := map[string][]byte{}
	for _, doc := range r.docs {
		key, _ := gvk(t, doc)
		if _, ok := byKind[key]; !ok {
			byKind[key] = doc
		}
	}
	container := func(o map[string]any) map[string]any {
		return dig(t, o, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	}
	cases := []struct {
		name, kind, wantPath string
		breakIt              func(o map[string]any)
	}{
		{"unknown field", "apps/v1/Deployment", "/spec/template/spec/containers/0",
			func(o map[string]any) { container(o)["imagePullPolicyy"] = "Always" }},
		{"missing required field", "apps/v1/Deployment", "/spec/template/spec/containers/0",
			func(o map[string]any) { delete(container(o), "name") }},
		{"wrong type", "apps/v1/Deployment", "/spec/replicas",
			func(o map[string]any) { dig(t, o, "spec").(map[string]any)["replicas"] = "two" }},
		{"missing schema", "apps/v1/Deployment", "",
			func(o map[string]any) { o["apiVersion"] = "apps/v1beta2" }},
		{"wrong enum", "monitoring.coreos.com/v1/PodMonitor", "/spec/podMetricsEndpoints/0/scheme",
			func(o map[string]any) {
				dig(t, o, "spec", "podMetricsEndpoints").([]any)[0].(map[string]any)["scheme"] = "ftp"
			}},
		{"CRD missing required field", "keda.sh/v1alpha1/ScaledObject", "/spec",
			func(o map[string]any) { delete(dig(t, o, "spec").(map[string]any), "scaleTargetRef") }},
		{"CRD unknown field", "keda.sh/v1alpha1/ScaledObject", "/spec",
			func(o map[string]any) { dig(t, o, "spec").(map[string]any)["maxReplicas"] = 3 }},
		{"CloudNativePG Cluster unknown field", "postgresql.cnpg.io/v1/Cluster", "/spec",
			func(o map[string]any) { dig(t, o, "spec").(map[string]any)["replicas"] = 3 }},
		{"CloudNativePG Cluster wrong type", "postgresql.cnpg.io/v1/Cluster", "/spec/instances",
			func(o map[string]any) { dig(t, o, "spec").(map[string]any)["instances"] = "three" }},
		{"CloudNativePG ScheduledBackup missing required field", "postgresql.cnpg.io/v1/ScheduledBackup", "/spec",
			func(o map[string]any) { delete(dig(t, o, "spec").(map[string]any), "schedule") }},
		{"metadata unknown field", "v1/ConfigMap", "/metadata",
			func(o map[string]any) { dig(t, o, "metadata").(map[string]any)["label"] = "x" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc, ok := byKind[c.kind]
			if !ok {
				t.Fatalf("overlays/prod renders no %s", c.kind)
			}
			if res := validate(v, c.kind, doc); res.Status != validator.Valid {
				t.Fatalf("unbroken %s is not valid: %s", c.kind, describe(res))
			}
			var o map[string]any
			if err := yaml.Unmarshal(doc, &o); err != nil {
				t.Fatal(err)
			}
			c.breakIt(o)
			broken, err := yaml.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			res := validate(v, c.kind, broken)
			if c.wantPath == "" { // no schema for the kind: an error, not a skip
				if res.Status != validator.Error {
					t.Fatalf("broken %s: status %d, want Error: %s", c.kind, res.Status, describe(res))
				}
				return
			}
			if res.Status != validator.Invalid {
				t.Fatalf("broken %s: status %d, want Invalid: %s", c.kind, res.Status, describe(res))
			}
			found := false
			for _, e := range res.ValidationErrors {
				found = found || e.Path == c.wantPath
			}
			if !found {
				t.Errorf("broken %s: no error at %s:%s", c.kind, c.wantPath, describe(res))
			}
		})
	}
}

// dig returns the value at path in o, failing the test if it is missing.
func dig(t *testing.T, o map[string]any, path ...string) any {
	t.Helper()
	var cur any = o
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok || m[p] == nil {
			t.Fatalf("no %s in document", strings.Join(path, "."))
		}
		cur = m[p]
	}
	return cur
}
