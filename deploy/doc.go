// Package deploy holds the Kubernetes manifests (kustomize base and the dev
// and prod overlays) and the offline tests that render and validate them.
package deploy
