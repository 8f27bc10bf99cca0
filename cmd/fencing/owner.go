package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/fencing-go/fencing/backend"
)

// addOwnerFlag declares --owner (FENCING_OWNER) on a command that takes
// leases: the public label stored with each lease and shown by get, list
// and watch. It defaults to this process's host name and PID.
func addOwnerFlag(cmd *cobra.Command, f *connFlags) {
	fs := cmd.Flags()
	fs.StringVar(&f.owner, "owner", defaultOwner(), "the lease's owner: a public label shown by get, list and watch (\"\" for none; never a secret)")
	fs.SetAnnotation("owner", envAnnotation, []string{envName("owner")})
	pre := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if pre != nil {
			if err := pre(cmd, args); err != nil {
				return err
			}
		}
		if err := backend.CheckOwner(f.owner); err != nil {
			return fmt.Errorf("%w: --owner: %w", errUsage, err)
		}
		return nil
	}
}

// defaultOwner is "<host name>/pid <PID>", or "pid <PID>" when the host
// name cannot be read or is not a valid owner.
func defaultOwner() string {
	pid := "pid " + strconv.Itoa(os.Getpid())
	host, err := os.Hostname()
	if err != nil || host == "" || backend.CheckOwner(host+"/"+pid) != nil {
		return pid
	}
	return host + "/" + pid
}

// ownerSuffix is ", owner <owner>" for text output, or nothing for none.
func ownerSuffix(owner string) string {
	if owner == "" {
		return ""
	}
	return ", owner " + strconv.Quote(owner)
}
