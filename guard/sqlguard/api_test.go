package sqlguard_test

import (
	"database/sql"
	"reflect"
	"testing"

	"github.com/fencing-go/fencing/guard/sqlguard"
)

// TestAdmitTakesATransaction: Admit, whose fence must move with the write,
// takes only a *sql.Tx, so a *sql.DB passed by mistake does not compile;
// Takeover is the one on a *sql.DB.
func TestAdmitTakesATransaction(t *testing.T) {
	g := reflect.TypeFor[*sqlguard.Guard]()
	for name, want := range map[string]reflect.Type{"Admit": reflect.TypeFor[*sql.Tx](), "Takeover": reflect.TypeFor[*sql.DB]()} {
		m, ok := g.MethodByName(name)
		if !ok {
			t.Errorf("Guard has no %s", name)
			continue
		}
		if got := m.Type.In(2); got != want { // In(0) is the receiver, In(1) the context
			t.Errorf("Guard.%s takes a %v, want %v", name, got, want)
		}
	}
}
