// runc, with every container's capabilities cut to this process's bounding set: where root's
// bounding set lacks one (CAP_SYS_RESOURCE on our machines), runc cannot start a privileged
// container, which asks for all of them, and kind's nodes are privileged containers. The kind
// e2e's private Docker engine and the kind node image's containerd run runc through it
// (kafka_mirror_dev/kind.py).
package main

import (
	"encoding/json"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

var names = []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL",
	"SETGID", "SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST",
	"NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT",
	"SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME",
	"SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
	"MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ",
	"PERFMON", "BPF", "CHECKPOINT_RESTORE"}

func bounding() map[string]bool {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if value, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(value), 16, 64)
			if err != nil {
				log.Fatal(err)
			}
			allowed := map[string]bool{}
			for i, name := range names {
				if mask>>i&1 == 1 {
					allowed["CAP_"+name] = true
				}
			}
			return allowed
		}
	}
	log.Fatal("no CapBnd in /proc/self/status")
	return nil
}

// cut rewrites the process spec at path (inside "process" when nested) without the
// capabilities the bounding set lacks.
func cut(path string, nested bool, allowed map[string]bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		log.Fatalf("%s: %v", path, err)
	}
	process := doc
	if nested {
		process, _ = doc["process"].(map[string]any)
	}
	if caps, ok := process["capabilities"].(map[string]any); ok {
		for kind, list := range caps {
			kept := []any{}
			for _, name := range list.([]any) {
				if allowed[name.(string)] {
					kept = append(kept, name)
				}
			}
			caps[kind] = kept
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		log.Fatal(err)
	}
}

func main() {
	args := os.Args[1:]
	allowed := bounding()
	for i, arg := range args[:max(len(args)-1, 0)] {
		switch arg {
		case "--bundle", "-b":
			cut(filepath.Join(args[i+1], "config.json"), true, allowed)
		case "--process", "-p":
			cut(args[i+1], false, allowed)
		}
	}
	runc := os.Getenv("RUNC_BOUNDED_RUNC")
	if runc == "" {
		runc = "/usr/sbin/runc"
	}
	if err := syscall.Exec(runc, append([]string{"runc"}, args...), os.Environ()); err != nil {
		log.Fatalf("%s: %v", runc, err)
	}
}
