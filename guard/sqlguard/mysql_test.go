package sqlguard_test

import (
	"fmt"
	"testing"

	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/guard/sqlguard"
	"github.com/fencing-go/fencing/internal/testing/mysqltest"
)

func TestMySQLConformance(t *testing.T) {
	db := mysqltest.Start(t).DB(t)
	conformance.RunGuard(t, &sqlHarness{db: db, dialect: sqlguard.MySQL})
}

func TestMySQLCreateTableTogether(t *testing.T) {
	srv := mysqltest.Start(t)
	createTogether(t, sqlguard.MySQL, func(run int) (string, string, []string) {
		return "mysql", fmt.Sprintf("fences_%d", run), []string{srv.DSN()}
	})
}
