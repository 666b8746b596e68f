package deploy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	natsconf "github.com/nats-io/nats-server/v2/conf"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/riftflow/riftflow/streams"
)

// TestNATSRendered checks the NATS chart as rendered (deploy/kube/render.sh,
// chart 2.14.2) with the prod values, which is what a cluster runs: the
// pinned server image, WebSocket on with "web" as its user without
// credentials, the riftflow users of auth.conf (the same bytes as
// deploy/nats/auth.conf: re-render after regenerating it), and TLS on
// client and route ports with a CA to verify route peers. local.yaml, the
// same with values-local.yaml, must agree on all but the image.
func TestNATSRendered(t *testing.T) {
	auth, err := os.ReadFile("nats/auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ file, image string }{
		{"nats/rendered/prod.yaml", "nats:2.15.2-alpine"},
		{"nats/rendered/local.yaml", "riftflow.local/nats-server:2.15.2"},
	} {
		t.Run(c.file, func(t *testing.T) {
			raw, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(raw, []byte("helm.sh/chart: nats-2.14.2")) {
				t.Error("not rendered from NATS chart 2.14.2")
			}
			var sts *appsv1.StatefulSet
			var cm *corev1.ConfigMap
			for _, doc := range strings.Split(string(raw), "\n---\n") {
				var head struct{ Kind string }
				if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
					t.Fatal(err)
				}
				switch head.Kind {
				case "StatefulSet":
					sts = new(appsv1.StatefulSet)
					if err := yaml.UnmarshalStrict([]byte(doc), sts); err != nil {
						t.Fatal(err)
					}
				case "ConfigMap":
					cm = new(corev1.ConfigMap)
					if err := yaml.UnmarshalStrict([]byte(doc), cm); err != nil {
						t.Fatal(err)
					}
				}
			}
			if sts == nil || cm == nil {
				t.Fatal("no StatefulSet or ConfigMap rendered")
			}
			if got := sts.Spec.Template.Spec.Containers[0].Image; got != c.image {
				t.Errorf("image = %q, want %q", got, c.image)
			}
			if got := cm.Data["auth.conf"]; got != string(auth) {
				t.Error("auth.conf in the rendered ConfigMap differs from deploy/nats/auth.conf: re-render (deploy/kube/render.sh)")
			}
			conf := cm.Data["nats.conf"]
			if !strings.Contains(conf, "include auth.conf;") {
				t.Error("nats.conf does not include auth.conf")
			}
			// Parse it as nats-server does, with auth.conf beside it and the
			// variables it reads from the environment.
			dir := t.TempDir()
			for name, body := range map[string]string{"nats.conf": conf, "auth.conf": cm.Data["auth.conf"]} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("SERVER_NAME", "nats-0")
			for _, u := range regexp.MustCompile(`\$(NATS_PASSWORD_[A-Z_]+)`).FindAllStringSubmatch(cm.Data["auth.conf"], -1) {
				t.Setenv(u[1], "x")
			}
			m, err := natsconf.ParseFile(filepath.Join(dir, "nats.conf"))
			if err != nil {
				t.Fatalf("nats.conf does not parse: %v", err)
			}
			// nats-server reads these as numbers (sizes with a unit must be
			// unquoted, << 8MB >> in the chart's values): a string fails its
			// start with "interface {} is string, not int64".
			js, _ := m["jetstream"].(map[string]any)
			for key, v := range map[string]any{"max_payload": m["max_payload"], "port": m["port"], "http_port": m["http_port"],
				"jetstream.max_file_store": js["max_file_store"], "jetstream.max_memory_store": js["max_memory_store"]} {
				if _, ok := v.(int64); v != nil && !ok {
					t.Errorf("nats.conf %s = %#v (%T): nats-server needs a number", key, v, v)
				}
			}
			b, _ := json.Marshal(m)
			var cfg struct {
				Websocket struct {
					Port       int    `json:"port"`
					NoAuthUser string `json:"no_auth_user"`
				} `json:"websocket"`
				TLS struct {
					CertFile string `json:"cert_file"`
				} `json:"tls"`
				Cluster struct {
					TLS struct {
						CAFile string `json:"ca_file"`
					} `json:"tls"`
				} `json:"cluster"`
			}
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.Websocket.Port == 0 || cfg.Websocket.NoAuthUser != streams.UserWeb {
				t.Errorf("websocket = %+v, want on, no_auth_user %q", cfg.Websocket, streams.UserWeb)
			}
			if cfg.TLS.CertFile == "" || cfg.Cluster.TLS.CAFile == "" {
				t.Errorf("client TLS cert %q, route CA %q: want TLS on both, with a CA for route peers", cfg.TLS.CertFile, cfg.Cluster.TLS.CAFile)
			}
		})
	}
}
