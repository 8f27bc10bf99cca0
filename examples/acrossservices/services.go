package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/grpcguard"
	"github.com/fencing-go/fencing/guard/httpguard"
	"github.com/fencing-go/fencing/guard/sqlguard"
)

// Service A keeps one value per resource in a SQL table, fenced by sqlguard,
// and copies each write to service B over gRPC inside the same
// transaction: the fence, A's row and B's write commit together, or A rolls
// back.
//
//	PUT /value?op=write   the body is the value
//	PUT /value?op=admit   fence only (a new holder at takeover)
//	PUT /value?op=fail    a write that fails after the token was checked
//
// Every PUT needs a Fencing-Token header; the resource is the token's.
type serviceA struct {
	db     *sql.DB
	fences *sqlguard.Guard
	upsert string // args: resource, value
	b      *grpc.ClientConn

	refusedHere, refusedByB atomic.Int64 // stale tokens refused by A's database, by B
}

// newServiceA creates A's tables on db (values in table values) and returns
// A, which calls B on conn.
func newServiceA(ctx context.Context, db *sql.DB, d sqlguard.Dialect, fences, values string, conn *grpc.ClientConn) (*serviceA, error) {
	g, err := sqlguard.New(d, sqlguard.WithTable(fences))
	if err != nil {
		return nil, err
	}
	if err := g.CreateTable(ctx, db); err != nil {
		return nil, err
	}
	blob, upsert := "BLOB", "INSERT INTO %s (resource, value) VALUES (?, ?) ON CONFLICT (resource) DO UPDATE SET value = excluded.value"
	if d == sqlguard.Postgres {
		blob, upsert = "BYTEA", "INSERT INTO %s (resource, value) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET value = excluded.value"
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (resource %s PRIMARY KEY, value %[2]s NOT NULL)", values, blob)); err != nil {
		return nil, err
	}
	return &serviceA{db: db, fences: g, upsert: fmt.Sprintf(upsert, values), b: conn}, nil
}

// Handler is A's HTTP handler, behind httpguard's middleware.
func (a *serviceA) Handler() http.Handler {
	return httpguard.Middleware(http.HandlerFunc(a.put), httpguard.RequireToken())
}

func (a *serviceA) put(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// The middleware put the caller's token in the context; the gRPC client
	// interceptor sends it on to B from the same context.
	resource, token, _ := guard.TokenFromContext(ctx)
	value, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	op := r.URL.Query().Get("op")
	calledB := false
	// The check and the write in one transaction: sqlguard admits the token
	// in it, and everything below commits with the fence or not at all.
	err = a.fences.Write(ctx, a.db, nil, resource, token, func(tx *sql.Tx) error {
		if op != "admit" {
			if _, err := tx.ExecContext(ctx, a.upsert, []byte(resource), value); err != nil {
				return err
			}
		}
		calledB = true
		return callB(ctx, a.b, op, value) // B refuses a token below its own fence
	})
	if errors.Is(err, guard.ErrStaleToken) {
		if calledB {
			a.refusedByB.Add(1)
		} else {
			a.refusedHere.Add(1)
		}
	}
	if httpguard.WriteStale(w, resource, err) {
		return // 409, nothing committed
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintln(w, "ok")
}

// bStore is service B's store, behind a guard: redisguard in the
// end-to-end test, a guard.Memory over a map in the example program.
type bStore interface {
	Admit(ctx context.Context, resource string, token uint64) error
	Write(ctx context.Context, resource string, token uint64, value []byte) error
	// FailedWrite is a write that fails after the token was checked,
	// leaving nothing behind.
	FailedWrite(ctx context.Context, resource string, token uint64, value []byte) error
}

// serviceB writes to its store with the token of each call's context (the
// grpcguard server interceptor put it there), and counts stale refusals.
type serviceB struct {
	store   bStore
	refused atomic.Int64
}

type bServer interface {
	do(ctx context.Context, op string, value []byte) error
}

func (b *serviceB) do(ctx context.Context, op string, value []byte) error {
	resource, token, ok := guard.TokenFromContext(ctx)
	if !ok {
		return guard.ErrNoToken
	}
	var err error
	switch op {
	case "admit":
		err = b.store.Admit(ctx, resource, token)
	case "fail":
		err = b.store.FailedWrite(ctx, resource, token, value)
	default:
		err = b.store.Write(ctx, resource, token, value)
	}
	if errors.Is(err, guard.ErrStaleToken) {
		b.refused.Add(1)
	}
	return err // a stale token becomes FailedPrecondition in the interceptor
}

// bDesc is B's service, written by hand (no generated code): one unary
// method per op, each taking the value as a BytesValue.
var bDesc = grpc.ServiceDesc{
	ServiceName: "fencing.example.B",
	HandlerType: (*bServer)(nil),
	Methods:     []grpc.MethodDesc{bMethod("write"), bMethod("admit"), bMethod("fail")},
}

func bMethod(op string) grpc.MethodDesc {
	full := "/fencing.example.B/" + op
	return grpc.MethodDesc{
		MethodName: op,
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return &emptypb.Empty{}, srv.(bServer).do(ctx, op, req.(*wrapperspb.BytesValue).Value)
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
		},
	}
}

// callB calls B's op with the token of ctx.
func callB(ctx context.Context, conn *grpc.ClientConn, op string, value []byte) error {
	if op != "admit" && op != "fail" {
		op = "write"
	}
	return conn.Invoke(ctx, "/fencing.example.B/"+op, wrapperspb.Bytes(value), new(emptypb.Empty))
}

// serveB serves b over gRPC on lis until stop is called.
func serveB(lis net.Listener, b *serviceB) (stop func()) {
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpcguard.UnaryServerInterceptor(grpcguard.RequireToken())))
	srv.RegisterService(&bDesc, b)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	return func() { srv.Stop(); <-done }
}

// dialB returns a client connection to B that carries the context's token.
func dialB(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcguard.UnaryClientInterceptor()))
}

// holderClient is the holder's side: it calls A over HTTP with the token of
// its context.
type holderClient struct {
	url    string
	client *http.Client
}

func newHolderClient(url string, tr *http.Transport) *holderClient {
	return &holderClient{url: url, client: &http.Client{Transport: httpguard.Transport(tr)}}
}

// put sends op for the token in ctx. A stale token's 409 comes back as a
// *guard.StaleTokenError.
func (h *holderClient) put(ctx context.Context, op string, value string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, h.url+"/value?op="+op, strings.NewReader(value))
	if err != nil {
		return err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := httpguard.CheckResponse(resp); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("service A: %s: %s", resp.Status, body)
	}
	return nil
}
