package natsbackend

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing-go/fencing/backend"
)

// msgGetRequest and msgGetResponse are the JetStream API's
// STREAM.MSG.GET, which the stream's leader answers (never a follower or a
// mirror, as the direct get that KeyValue.Get uses on a bucket with
// AllowDirect may be).
type msgGetRequest struct {
	LastBySubject string `json:"last_by_subj"`
}

type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Sequence uint64 `json:"seq"`
		Header   []byte `json:"hdrs,omitempty"`
		Data     []byte `json:"data,omitempty"`
	} `json:"message,omitempty"`
}

// read gets key's entry from the stream's leader and judges it. A key with
// no entry is (zero status, false, nil); a deleted or purged entry (a
// marker, whose revision a write must name) is a zero record at the
// marker's revision.
func (b *Backend) read(ctx context.Context, key string) (status, bool, error) {
	if _, ok := ctx.Deadline(); !ok {
		// As the jetstream package bounds its own requests: a reply
		// lost in a reconnect would otherwise be waited for for ever.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.timeout)
		defer cancel()
	}
	subject := "$KV." + b.bucket + "." + kvKey(key)
	req, _ := json.Marshal(msgGetRequest{LastBySubject: subject})
	msg, err := b.nc.RequestWithContext(ctx, b.api+"STREAM.MSG.GET."+b.stream, req)
	if err != nil {
		return status{}, false, readErr("get "+kvKey(key), err)
	}
	var resp msgGetResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return status{}, false, readErr("get "+kvKey(key), err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			b.forget(key)
			return status{}, false, nil
		}
		return status{}, false, readErr("get "+kvKey(key), resp.Error)
	}
	if resp.Message == nil {
		return status{}, false, readErr("get "+kvKey(key), jetstream.ErrInvalidJetStreamResponse)
	}
	m := resp.Message
	data := m.Data
	if len(m.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(m.Header)
		if err != nil {
			return status{}, false, readErr("get "+kvKey(key), err)
		}
		if op := h.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			data = nil
		}
	}
	now := b.now()
	r, err := parse(data, m.Sequence)
	if err != nil {
		return status{}, false, fmt.Errorf("natsbackend: key %s: %w", kvKey(key), err)
	}
	return judge(r, b.observe(key, r.rev, now), now), true, nil
}

// Token returns the token of key's live lease, read from the stream's
// leader.
func (b *Backend) Token(ctx context.Context, key string) (uint64, bool, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return 0, false, err
	}
	s, _, err := b.read(ctx, key)
	if err != nil || !s.live {
		return 0, false, err
	}
	return s.Token, true, nil
}
