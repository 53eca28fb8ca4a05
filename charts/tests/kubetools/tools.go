//go:build tools

// Package kubetools pins the chart's validators; kubetools.sh builds their commands.
package kubetools

import (
	_ "github.com/yannh/kubeconform/cmd/kubeconform"
	_ "github.com/zegl/kube-score/cmd/kube-score"
)
