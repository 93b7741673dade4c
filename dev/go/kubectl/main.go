// kubectl for the dev stack. k8s.io/kubectl publishes the command (pkg/cmd) but no main package,
// and building k8s.io/kubernetes/cmd/kubectl would need its staging replaces, so this module
// holds a minimal main around the published command.
package main

import (
	"os"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // exec and OIDC credential plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// klog is used while the command is built (plugins, kuberc), before cobra parses -v.
	_, _ = logs.GlogSetter(cmd.GetLogVerbosity(os.Args))
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
