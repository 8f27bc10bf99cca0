package etcdtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// memberStatus is the part of a member's status (Maintenance.Status, as its
// gRPC gateway serves it in JSON) that the harness reads.
type memberStatus struct {
	Header struct {
		MemberID uint64 `json:"member_id,string"`
	} `json:"header"`
	Leader uint64 `json:"leader,string"`
}

// statusClient asks one member at a time, each request on a connection of
// its own (nothing idle is left for goleak to find), never for long: a
// member that does not answer within a second is not serving.
var statusClient = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// status returns the status of the member serving clientURL.
func status(clientURL string) (memberStatus, error) {
	var st memberStatus
	resp, err := statusClient.Post(clientURL+"/v3/maintenance/status", "application/json", strings.NewReader("{}"))
	if err != nil {
		return st, fmt.Errorf("etcdtest: status: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("etcdtest: status: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("etcdtest: status: %w", err)
	}
	return st, nil
}
