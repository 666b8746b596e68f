// Package deploy holds the Kubernetes manifests and their tests.
//
//   - base/: the nine workloads (resolver, matchid-lister, one
//     match-fetcher per regional routing value, persister, retry-sweeper,
//     the HTTP API as `riftflow serve`), their generated ConfigMaps, PDBs,
//     KEDA ScaledObjects, the NetworkPolicy and the migrate Job.
//   - overlays/dev, overlays/prod: the environments (dev brings Postgres
//     and Jaeger; prod CloudNativePG with backups, NATS over TLS with one
//     password user per service from nats/auth.conf, STREAM_REPLICAS=3,
//     monitoring).
//   - components/monitoring: PodMonitors, the PrometheusRule and the
//     Grafana dashboard.
//   - nats/: values for the official NATS Helm chart.
//
// The tests render every kustomization with kustomize's Go API (krusty)
// and validate each document offline by strict decoding (unknown fields
// fail) into its Go type: k8s.io/api for the built-in kinds, the
// prometheus-operator types for PodMonitor and PrometheusRule, and
// subset structs of the fields used for KEDA's ScaledObject and
// CloudNativePG's Cluster and ScheduledBackup. TestRenderedWorkloadsRun
// then runs the rendered workloads as local processes (see its comment),
// and TestEveryEnvVarDocumented keeps docs/configuration.md complete.
package deploy
