package deploy_test

import (
	"path/filepath"
	"regexp"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// scaledObject is the subset of KEDA's keda.sh/v1alpha1 ScaledObject these
// manifests use. Decoding is strict, so a misspelt or unsupported field in a
// manifest fails the test instead of being ignored by the cluster.
type scaledObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		// Fallback is the replica count KEDA keeps while the scaler fails
		// FailureThreshold times in a row (NATS monitoring unreachable).
		Fallback *struct {
			FailureThreshold int32  `json:"failureThreshold"`
			Replicas         int32  `json:"replicas"`
			Behavior         string `json:"behavior,omitempty"`
		} `json:"fallback,omitempty"`
		// Advanced.HorizontalPodAutoscalerConfig.Behavior is passed to the
		// HPA KEDA makes (scale-down stabilization window, policies).
		Advanced *struct {
			HorizontalPodAutoscalerConfig *struct {
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type     string            `json:"type"`
			Name     string            `json:"name,omitempty"`
			Metadata map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// cnpgCluster is the subset of CloudNativePG's postgresql.cnpg.io/v1
// Cluster used by the prod overlay, decoded strictly.
type cnpgCluster struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Instances             int    `json:"instances"`
		ImageName             string `json:"imageName,omitempty"`
		PrimaryUpdateStrategy string `json:"primaryUpdateStrategy,omitempty"`
		Storage               struct {
			Size resource.Quantity `json:"size"`
		} `json:"storage"`
		WALStorage *struct {
			Size resource.Quantity `json:"size"`
		} `json:"walStorage,omitempty"`
		PostgreSQL struct {
			Parameters map[string]string `json:"parameters,omitempty"`
		} `json:"postgresql"`
		Bootstrap struct {
			InitDB struct {
				Database string `json:"database"`
				Owner    string `json:"owner"`
			} `json:"initdb"`
		} `json:"bootstrap"`
		Resources corev1.ResourceRequirements `json:"resources"`
		Backup    *struct {
			RetentionPolicy   string `json:"retentionPolicy,omitempty"`
			BarmanObjectStore *struct {
				DestinationPath string `json:"destinationPath"`
				EndpointURL     string `json:"endpointURL,omitempty"`
				S3Credentials   *struct {
					AccessKeyID     corev1.SecretKeySelector `json:"accessKeyId"`
					SecretAccessKey corev1.SecretKeySelector `json:"secretAccessKey"`
				} `json:"s3Credentials,omitempty"`
				Wal *struct {
					Compression string `json:"compression,omitempty"`
				} `json:"wal,omitempty"`
				Data *struct {
					Compression string `json:"compression,omitempty"`
				} `json:"data,omitempty"`
			} `json:"barmanObjectStore,omitempty"`
		} `json:"backup,omitempty"`
	} `json:"spec"`
}

// cnpgScheduledBackup is CloudNativePG's postgresql.cnpg.io/v1
// ScheduledBackup, decoded strictly.
type cnpgScheduledBackup struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		// Schedule has six fields: seconds first.
		Schedule             string `json:"schedule"`
		BackupOwnerReference string `json:"backupOwnerReference,omitempty"`
		Immediate            bool   `json:"immediate,omitempty"`
		Method               string `json:"method,omitempty"`
		Cluster              struct {
			Name string `json:"name"`
		} `json:"cluster"`
	} `json:"spec"`
}

// rendered holds every object of one kustomization, by kind and name.
type rendered struct {
	deployments   map[string]*appsv1.Deployment
	statefulSets  map[string]*appsv1.StatefulSet
	jobs          map[string]*batchv1.Job
	configMaps    map[string]*corev1.ConfigMap
	secrets       map[string]*corev1.Secret
	services      map[string]*corev1.Service
	namespaces    map[string]*corev1.Namespace
	pdbs          map[string]*policyv1.PodDisruptionBudget
	scaledObjects map[string]*scaledObject
	clusters      map[string]*cnpgCluster
	backups       map[string]*cnpgScheduledBackup
	netpols       map[string]*networkingv1.NetworkPolicy
	podMonitors   map[string]*monitoringv1.PodMonitor
	rules         map[string]*monitoringv1.PrometheusRule
	// docs holds every rendered document, in order (the process test and
	// the schema checks read them).
	docs [][]byte
}

// render builds the kustomization in dir in-process, as `kubectl kustomize`
// would, and strictly decodes every document into its API type. A kind the
// test does not know fails the test, so nothing escapes validation.
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.FromSlash(dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := &rendered{}
	// Where a document of each kind goes (a kind not listed fails the test).
	kinds := map[string]func(name string) any{
		"apps/v1/Deployment":                      into(&r.deployments),
		"apps/v1/StatefulSet":                     into(&r.statefulSets),
		"batch/v1/Job":                            into(&r.jobs),
		"v1/ConfigMap":                            into(&r.configMaps),
		"v1/Secret":                               into(&r.secrets),
		"v1/Service":                              into(&r.services),
		"v1/Namespace":                            into(&r.namespaces),
		"policy/v1/PodDisruptionBudget":           into(&r.pdbs),
		"keda.sh/v1alpha1/ScaledObject":           into(&r.scaledObjects),
		"postgresql.cnpg.io/v1/Cluster":           into(&r.clusters),
		"postgresql.cnpg.io/v1/ScheduledBackup":   into(&r.backups),
		"networking.k8s.io/v1/NetworkPolicy":      into(&r.netpols),
		"monitoring.coreos.com/v1/PodMonitor":     into(&r.podMonitors),
		"monitoring.coreos.com/v1/PrometheusRule": into(&r.rules),
	}
	for _, res := range m.Resources() {
		doc, err := res.AsYAML()
		if err != nil {
			t.Fatalf("%s: %v", res.CurId(), err)
		}
		r.docs = append(r.docs, doc)
		gvk := res.GetGvk()
		key := gvk.ApiVersion() + "/" + gvk.Kind
		name := res.GetName()
		put, ok := kinds[key]
		if !ok {
			t.Errorf("%s: %s %s has no validation; add it to render", dir, key, name)
			continue
		}
		dst := put(name)
		if key == "v1/ConfigMap" {
			// Also kept under its name without the generator's hash.
			r.configMaps[hashSuffix.ReplaceAllString(name, "")] = r.configMaps[name]
		}
		if err := yaml.UnmarshalStrict(doc, dst); err != nil {
			t.Errorf("%s: %s %s: strict decode: %v", dir, key, name, err)
		}
	}
	return r
}

// hashSuffix is the content hash kustomize appends to a generated name.
var hashSuffix = regexp.MustCompile(`-[bcdfghkmnt2456789]{10}$`)

// into makes *m an empty map and returns a function that allocates a value
// for a name in it and returns a pointer to decode into.
func into[T any](m *map[string]*T) func(name string) any {
	*m = map[string]*T{}
	return func(name string) any {
		v := new(T)
		(*m)[name] = v
		return v
	}
}

// podTemplates returns every pod template in r, keyed "Kind/name".
func (r *rendered) podTemplates() map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for n, d := range r.deployments {
		out["Deployment/"+n] = &d.Spec.Template
	}
	for n, s := range r.statefulSets {
		out["StatefulSet/"+n] = &s.Spec.Template
	}
	for n, j := range r.jobs {
		out["Job/"+n] = &j.Spec.Template
	}
	return out
}

// env resolves the value a container sees for name from its env and
// envFrom ConfigMaps (env wins; a later envFrom source wins over an earlier
// one, as in Kubernetes). ok is false when the variable is unset or comes
// from a Secret.
func (r *rendered) env(t *testing.T, c *corev1.Container, name string) (value string, ok bool) {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, e.ValueFrom == nil
		}
	}
	for i := len(c.EnvFrom) - 1; i >= 0; i-- {
		ref := c.EnvFrom[i].ConfigMapRef
		if ref == nil {
			continue
		}
		cm, found := r.configMaps[ref.Name]
		if !found {
			t.Errorf("container %s: envFrom ConfigMap %q is not rendered", c.Name, ref.Name)
			continue
		}
		if v, found := cm.Data[name]; found {
			return v, true
		}
	}
	return "", false
}

func containers(p *corev1.PodSpec) []*corev1.Container {
	var out []*corev1.Container
	for i := range p.InitContainers {
		out = append(out, &p.InitContainers[i])
	}
	for i := range p.Containers {
		out = append(out, &p.Containers[i])
	}
	return out
}
