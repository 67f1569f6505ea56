// Wrapper around the upstream gardener-apiserver command, built from Go modules for the test
// environment. It contains no Gardener code of its own.
package main

import (
	"os"

	_ "k8s.io/component-base/logs/json/register"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	"github.com/gardener/gardener/cmd/gardener-apiserver/app"
	"github.com/gardener/gardener/cmd/utils"
	"github.com/gardener/gardener/pkg/apiserver/features"
)

func main() {
	utils.DeduplicateWarnings()
	features.RegisterFeatureGates()
	if err := app.NewCommand().ExecuteContext(signals.SetupSignalHandler()); err != nil {
		os.Exit(1)
	}
}
