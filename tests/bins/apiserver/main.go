// Wrapper around the upstream kube-apiserver and kubectl commands, built from Go modules for
// the test environment. It contains no Kubernetes code of its own.
package main

import (
	"os"
	"path/filepath"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

// One binary, two commands: invoked as "kubectl" (by name or symlink) it is kubectl,
// otherwise kube-apiserver. Sharing the binary halves build time and disk.
func main() {
	if filepath.Base(os.Args[0]) == "kubectl" {
		cmd := kubectl.NewDefaultKubectlCommand()
		if err := cli.RunNoErrOutput(cmd); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	}
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
