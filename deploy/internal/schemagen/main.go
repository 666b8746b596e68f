// Command schemagen writes the JSON schemas under deploy/schemas that
// TestRenderedSchemas validates every rendered document against, in the
// layout kubeconform reads ("<kind>-<group prefix>-<version>.json", the
// "standalone-strict" flavour: every $ref inlined, additionalProperties
// false on every object that lists its properties).
//
// Run it from the deploy module: `go generate .` (see schemas.go) or
// `go run ./internal/schemagen -out schemas`. Its inputs are files inside
// module zips that `go mod download` fetches from the Go module proxy:
//
//   - built-in kinds: api/openapi-spec/swagger.json of k8s.io/kubernetes
//     at the Kubernetes version matching k8s.io/api in go.mod (v1.37.2 for
//     v0.37.2);
//   - keda.sh ScaledObject: config/crd/bases of github.com/kedacore/keda/v2;
//   - monitoring.coreos.com PodMonitor and PrometheusRule:
//     example/prometheus-operator-crd of
//     github.com/prometheus-operator/prometheus-operator (the newest
//     version the proxy serves of that module);
//   - postgresql.cnpg.io Cluster and ScheduledBackup: config/crd/bases of
//     github.com/cloudnative-pg/cloudnative-pg. The proxy refuses that
//     module's version list, but serves an exact version's zip (CRDs
//     included), so the version here is always written out in full.
//
// Only the kinds the overlays render are written, without descriptions,
// so the files stay small. The output is deterministic: running it twice
// gives the same bytes.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Module versions the schemas come from.
const (
	kubernetesModule = "k8s.io/kubernetes@v1.37.2"
	kedaModule       = "github.com/kedacore/keda/v2@v2.21.0"
	promOpModule     = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
	cnpgModule       = "github.com/cloudnative-pg/cloudnative-pg@v1.28.0"
)

// builtin names a built-in kind by its swagger definition.
type builtin struct{ apiVersion, kind, definition string }

var builtins = []builtin{
	{"apps/v1", "Deployment", "io.k8s.api.apps.v1.Deployment"},
	{"apps/v1", "StatefulSet", "io.k8s.api.apps.v1.StatefulSet"},
	{"batch/v1", "Job", "io.k8s.api.batch.v1.Job"},
	{"v1", "ConfigMap", "io.k8s.api.core.v1.ConfigMap"},
	{"v1", "Secret", "io.k8s.api.core.v1.Secret"},
	{"v1", "Service", "io.k8s.api.core.v1.Service"},
	{"v1", "ServiceAccount", "io.k8s.api.core.v1.ServiceAccount"},
	{"v1", "Namespace", "io.k8s.api.core.v1.Namespace"},
	{"policy/v1", "PodDisruptionBudget", "io.k8s.api.policy.v1.PodDisruptionBudget"},
	{"networking.k8s.io/v1", "NetworkPolicy", "io.k8s.api.networking.v1.NetworkPolicy"},
}

// crd names a CustomResourceDefinition file inside a module and the
// version of it to write.
type crd struct{ module, file, version string }

var crds = []crd{
	{kedaModule, "config/crd/bases/keda.sh_scaledobjects.yaml", "v1alpha1"},
	{kedaModule, "config/crd/bases/keda.sh_triggerauthentications.yaml", "v1alpha1"},
	{promOpModule, "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml", "v1"},
	{promOpModule, "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml", "v1"},
	{cnpgModule, "config/crd/bases/postgresql.cnpg.io_clusters.yaml", "v1"},
	{cnpgModule, "config/crd/bases/postgresql.cnpg.io_scheduledbackups.yaml", "v1"},
}

const objectMeta = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

func main() {
	out := flag.String("out", "schemas", "directory to write the schemas to")
	flag.Parse()
	log.SetFlags(0)

	var swagger struct {
		Definitions map[string]any `json:"definitions"`
	}
	readJSON(filepath.Join(moduleDir(kubernetesModule), "api/openapi-spec/swagger.json"), &swagger)
	c := &converter{defs: swagger.Definitions}

	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	for _, b := range builtins {
		def, ok := c.defs[b.definition]
		if !ok {
			log.Fatalf("%s: no definition %s", kubernetesModule, b.definition)
		}
		s := c.convert(def, nil).(map[string]any)
		write(*out, b.apiVersion, b.kind, pin(s, b.apiVersion, b.kind))
	}
	for _, d := range crds {
		apiVersion, kind, s := c.crdSchema(filepath.Join(moduleDir(d.module), d.file), d.version)
		write(*out, apiVersion, kind, pin(s, apiVersion, kind))
	}
}

// moduleDir downloads mod ("path@version") into the module cache and
// returns its directory.
func moduleDir(mod string) string {
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		log.Fatalf("go mod download %s: %v\n%s", mod, err, stdout.String())
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil || info.Dir == "" {
		log.Fatalf("go mod download %s: %v %s", mod, err, info.Error)
	}
	return info.Dir
}

func readJSON(path string, v any) {
	b, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		log.Fatalf("%s: %v", path, err)
	}
}

type converter struct{ defs map[string]any }

// kept lists the schema keywords copied to the output; descriptions,
// defaults, formats and the x-kubernetes-* extensions are dropped.
var kept = map[string]bool{
	"type": true, "properties": true, "items": true, "required": true,
	"enum": true, "additionalProperties": true, "oneOf": true, "anyOf": true,
	"allOf": true, "not": true, "pattern": true, "minimum": true, "maximum": true,
	"exclusiveMinimum": true, "exclusiveMaximum": true, "minLength": true,
	"maxLength": true, "minItems": true, "maxItems": true, "uniqueItems": true,
	"minProperties": true, "maxProperties": true, "multipleOf": true,
}

// convert returns node as a standalone strict JSON schema (draft 4):
// swagger $refs inlined (stack holds the definitions being inlined, to cut
// cycles), int-or-string and Quantity as a oneOf of their YAML forms,
// nullable as an extra "null" type, and additionalProperties false on every
// object with properties unless it keeps unknown fields.
func (c *converter) convert(node any, stack []string) any {
	switch n := node.(type) {
	case []any:
		out := make([]any, len(n))
		for i, v := range n {
			out[i] = c.convert(v, stack)
		}
		return out
	case map[string]any:
		if ref, ok := n["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/definitions/")
			for _, s := range stack {
				if s == name {
					return map[string]any{} // a cycle: accept anything below
				}
			}
			def, ok := c.defs[name]
			if !ok {
				log.Fatalf("unresolved $ref %s", ref)
			}
			if name == "io.k8s.apimachinery.pkg.api.resource.Quantity" {
				return map[string]any{"oneOf": []any{
					map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
			}
			return c.convert(def, append(stack, name))
		}
		if n["format"] == "int-or-string" || n["x-kubernetes-int-or-string"] == true {
			return map[string]any{"oneOf": []any{
				map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
		}
		out := map[string]any{}
		for k, v := range n {
			if !kept[k] {
				continue
			}
			switch k {
			case "properties":
				props := map[string]any{}
				for name, p := range v.(map[string]any) {
					props[name] = c.convert(p, stack)
				}
				out[k] = props
			case "items", "additionalProperties", "oneOf", "anyOf", "allOf", "not":
				out[k] = c.convert(v, stack)
			default:
				out[k] = v
			}
		}
		if _, ok := out["properties"]; ok && out["additionalProperties"] == nil &&
			n["x-kubernetes-preserve-unknown-fields"] != true {
			out["additionalProperties"] = false
		}
		if n["nullable"] == true {
			if t, ok := out["type"].(string); ok {
				out["type"] = []any{t, "null"}
			}
		}
		return out
	default:
		return node
	}
}

// crdSchema reads a CustomResourceDefinition and returns its apiVersion,
// kind and the converted openAPIV3Schema of version, with metadata replaced
// by the strict ObjectMeta schema (a CRD only says "type: object" there).
func (c *converter) crdSchema(path, version string) (string, string, map[string]any) {
	b, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	var def struct {
		Spec struct {
			Group string
			Names struct{ Kind string }
			// Versions holds one schema per served version.
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(b, &def); err != nil {
		log.Fatalf("%s: %v", path, err)
	}
	for _, v := range def.Spec.Versions {
		if v.Name != version {
			continue
		}
		s := c.convert(v.Schema.OpenAPIV3Schema, nil).(map[string]any)
		props, _ := s["properties"].(map[string]any)
		if props == nil {
			log.Fatalf("%s %s: schema has no properties", path, version)
		}
		props["metadata"] = c.convert(map[string]any{"$ref": "#/definitions/" + objectMeta}, nil)
		return def.Spec.Group + "/" + version, def.Spec.Names.Kind, s
	}
	log.Fatalf("%s: no version %s", path, version)
	return "", "", nil
}

// pin makes apiVersion and kind required and fixed to the kind's values.
func pin(s map[string]any, apiVersion, kind string) map[string]any {
	props := s["properties"].(map[string]any)
	props["apiVersion"] = map[string]any{"type": "string", "enum": []any{apiVersion}}
	props["kind"] = map[string]any{"type": "string", "enum": []any{kind}}
	req := map[string]bool{"apiVersion": true, "kind": true}
	if r, ok := s["required"].([]any); ok {
		for _, v := range r {
			req[v.(string)] = true
		}
	}
	var names []any
	for _, k := range sortedKeys(req) {
		names = append(names, k)
	}
	s["required"] = names
	s["$schema"] = "http://json-schema.org/draft-04/schema#"
	return s
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// write stores s where kubeconform's "{{ .ResourceKind }}{{ .KindSuffix }}"
// template looks for apiVersion/kind: "deployment-apps-v1.json",
// "configmap-v1.json", "scaledobject-keda-v1alpha1.json".
func write(dir, apiVersion, kind string, s map[string]any) {
	group, version, found := strings.Cut(apiVersion, "/")
	suffix := "-" + strings.ToLower(strings.Split(group, ".")[0])
	if found {
		suffix += "-" + strings.ToLower(version)
	}
	name := strings.ToLower(kind) + suffix + ".json"
	b, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s %s -> %s (%d bytes)\n", apiVersion, kind, name, len(b)+1)
}
