package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fencing-go/fencing/backend"
)

// addLockDelayFlag declares --lock-delay (FENCING_LOCK_DELAY) on a command
// that takes leases (grant, hold): how long the key stays closed to new
// grants after the lease ends without a release by its holder.
func addLockDelayFlag(cmd *cobra.Command, f *connFlags) {
	fs := cmd.Flags()
	fs.DurationVar(&f.lockDelay, "lock-delay", 0, fmt.Sprintf("should the lease end without a release (expiry, release --force), keep the key closed this long more, so a holder that is still running can stop (0: none; at most %v)", backend.MaxLockDelay))
	fs.SetAnnotation("lock-delay", envAnnotation, []string{envName("lock-delay")})
	pre := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if pre != nil {
			if err := pre(cmd, args); err != nil {
				return err
			}
		}
		if err := backend.CheckLockDelay(f.lockDelay); err != nil {
			return fmt.Errorf("%w: --lock-delay: %w", errUsage, err)
		}
		return nil
	}
}
