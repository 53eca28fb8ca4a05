//go:build tools

// Package helm3 pins Helm 3, the second Helm the chart is tested with; helm3.sh builds it.
package helm3

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
