package etcdguard_test

import (
	"testing"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/etcdguard"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/internal/testing/minttest"
)

func TestMintCheck(t *testing.T) {
	cli := etcdtest.Client(t)
	minttest.Run(t, func(t *testing.T, mc *guard.MintCheck) minttest.Store {
		return etcdguard.New(cli, etcdguard.WithMintCheck(mc))
	})
}
