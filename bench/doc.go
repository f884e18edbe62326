// Package bench holds the side-by-side issuance benchmark: full RFC 8555
// flows against this plugin's acme_proxy handler and Caddy's built-in
// acme_server handler, both served by one real Caddy loaded in this
// process, driven by the same golang.org/x/crypto/acme client code.
//
// The package has no code of its own; everything is in its _test.go files.
//
// BenchmarkIssuance/clients={1,8,32}/server={acme_proxy,acme_server} gives
// each client its own account; the two servers run back to back at each
// level, so a pair shares the machine's conditions of the moment.
// BenchmarkIssuanceSharedAccount has all the clients use one account at
// once, which is where a server's concurrency bugs show as 5xx answers:
// any 5xx fails an acme_proxy run, and the first one of either server is
// logged.
//
// The two servers get the same conditions: one HTTPS site on 127.0.0.1
// (acme_proxy under /proxy/bench, acme_server under /acme/local), both
// signing with Caddy's local CA (ECDSA P-256) for 12h, both offering their
// default challenge types, both resolving names through the benchmark's
// DNS server (acme_proxy by its resolvers option; acme_server's resolvers
// serve only dns-01, so this process's net.DefaultResolver is pointed at
// the same server) and both fetching http-01 from the benchmark's
// responder on 127.0.0.1:80; their databases lie on the same disk. The
// clients are the same code: x/crypto/acme, ECDSA P-256 account and
// certificate keys, one keep-alive HTTP/2 connection per client, the same
// polling (below) and the same short fixed retry of 5xx and badNonce
// answers (the poll interval, 10ms in library mode; at most ten times),
// so that a retry does not stall a client for x/crypto's default second.
// Every certificate is verified: chain to the local root, exactly the name
// asked for, serverAuth, the CSR's key.
//
// BenchmarkRelay/clients={1,8}/server={pebble,acme_proxy,relay,relay_prepared}
// measures the relay signer's overhead: the same clients get certificates
// from an in-process Pebble that validates nothing
// (PEBBLE_VA_ALWAYS_VALID=1), once talking to it directly and once through
// an acme_proxy relay profile (/proxy/relay, challenge bypass upstream) in
// front of it (and once through one with prepare_upstream on,
// /proxy/relayprep); acme_proxy with its local CA runs in the same run, the
// floor of a relayed certificate. Pebble's
// finalize answers processing without a Location, which x/crypto/acme
// cannot poll, so the direct clients' transport adds it.
//
// BenchmarkHTTPFloor/clients={1,8,32} is the floor under acme_proxy's
// CPU per certificate: the same kind of clients send a certificate's seven
// requests (POSTs of a JWS's size) over their keep-alive HTTP/2
// connections to a route of the same site that Caddy's own respond
// answers with an order-sized body, and it reports sets/s and, with
// ACMEPROXY_BENCH_PROCESS=1, caddy-CPU-ms/set: what TLS, HTTP/2 and
// Caddy's routing cost a certificate's requests whatever the handler does.
//
// Run it (as root: Caddy's acme_server validates http-01 on port 80 only,
// so the benchmark's challenge responder must listen on 127.0.0.1:80; the
// benchmark skips with a message when it cannot):
//
//	go test -run '^$' -bench 'Issuance' -benchtime 200x -count 1 ./bench/
//
// b.N is the number of certificates of a sub-benchmark, so -benchtime 2000x
// scales a run up for profiling:
//
//	go test -run '^$' -bench '^BenchmarkIssuance$/^clients=8$/^server=acme_proxy$' \
//		-benchtime 2000x -cpuprofile cpu.out ./bench/
//	go tool pprof -top -tagignore 'role=client|responder' bench.test cpu.out
//
// Environment:
//
//   - ACMEPROXY_BENCH_POLL: how the client waits for an authorization and an
//     order: a fixed interval between polls (default 10ms), or "library"
//     for x/crypto/acme's own WaitAuthorization/WaitOrder, which sleep a
//     whole second (or Retry-After) between polls.
//   - ACMEPROXY_BENCH_DATABASE: acme_proxy's store, "sqlite" (default) or
//     "postgres": a PostgreSQL cluster the benchmark starts on this machine
//     (internal/pgtest: initdb and pg_ctl, a unix socket, fsync on), so that
//     the two stores are compared on the same machine, same disk. The
//     servers that use it then also report pg-CPU-ms/cert: the cluster's
//     user+system CPU over the timed part (postmaster, backends and
//     background processes, from /proc), per certificate.
//   - ACMEPROXY_BENCH_DIR: the directory the databases and Caddy's storage
//     go under (default: os.TempDir()); point it at a tmpfs to take the disk
//     out of the comparison.
//   - ACMEPROXY_BENCH_KEEP=1 keeps that directory (both databases) for a
//     look afterwards.
//   - ACMEPROXY_BENCH_PHASES=1 logs the p50 and p99 of each phase of a
//     certificate (new-order, authorization, challenge, waiting for the
//     authorization, waiting for the order, finalize and download, verify).
//   - ACMEPROXY_BENCH_LOG: "stderr" shows Caddy's logs; by default they are
//     encoded at level INFO and discarded, so logging costs what it costs
//     in production without flooding the benchmark's output.
//   - ACMEPROXY_BENCH_PROCESS=1 runs Caddy as its own process (this test
//     binary started again as `caddy run` on the benchmark's Caddyfile,
//     with the same modules), as a deployment runs it, and reports
//     caddy-CPU-ms/cert — that process's user+system CPU from
//     /proc/<pid>/stat over the timed part, per certificate: the server's
//     whole CPU, garbage collector and kernel included, without the load
//     generator's — and caddy-peak-RSS-MiB (VmHWM, reset before each
//     sub-benchmark). proc-CPU-ms/cert, B/cert and allocs/cert are then
//     the load generator's alone. Caddy's admin endpoint (the acme_proxy
//     admin API, /debug/pprof) listens on 127.0.0.1 in both modes; a
//     sub-benchmark logs its address with ACMEPROXY_BENCH_LOG=stderr.
//   - ACMEPROXY_BENCH_PROCESS=separate runs each server as its own Caddy
//     process, as the outside measurement did: acme_server alone
//     in a second `caddy run` (its own storage, local CA, ports and admin
//     endpoint), so that its caddy-CPU-ms/cert and caddy-peak-RSS-MiB are
//     its own and not shared with acme_proxy's heap and goroutines.
//   - ACMEPROXY_BENCH_HTTP01_PORT moves the http-01 responder off port 80
//     (acme_server then cannot validate: for BenchmarkScale, which runs
//     acme_proxy alone, while another run holds port 80).
//   - ACMEPROXY_BENCH_ORDERS, ACMEPROXY_BENCH_REVOKED: the size of
//     BenchmarkScale's seeded database (default 200000 orders, 100000 of
//     them revoked); see BenchmarkScale for what it measures.
//   - ACMEPROXY_BENCH_WINDOW: the length of BenchmarkScale's alternating
//     windows, with and without CRL regenerations, and between the seeded
//     and an empty database (default 4s).
//   - ACMEPROXY_PGTEST_OPTS: server options added to the throwaway
//     PostgreSQL cluster's, e.g. "-c
//     shared_preload_libraries=pg_stat_statements" to read
//     pg_stat_statements (statements, WAL records per statement) while a
//     benchmark with ACMEPROXY_BENCH_DATABASE=postgres runs.
//   - ACMEPROXY_BENCH_PPROF=<dir>: the issuance benchmarks fetch a
//     CPU profile of Caddy from its admin endpoint (/debug/pprof/profile,
//     the first ACMEPROXY_BENCH_PPROF_SECONDS of the timed part, default 5)
//     into <dir>/<sub-benchmark>.pprof; with ACMEPROXY_BENCH_PROCESS=1 it
//     is the server process's alone.
//   - ACMEPROXY_BENCH_TIMELINE=1: every request the clients send and every
//     request Pebble serves (the relay's upstream requests, or a direct
//     client's) is noted as it begins and ends; a one-client sub-benchmark
//     logs the gaps between consecutive events, labelled by the two
//     events around them, per certificate (total, count, median), largest
//     first — where a certificate's wall time goes, in a request, in the
//     server between two requests, in a poll's wait. Pebble's goroutines
//     carry the pprof label role=pebble.
//   - ACMEPROXY_BENCH_SERVER_CPU=1 profiles each timed part and reports
//     server-CPU-ms/cert: the process's CPU times the share of profile
//     samples not labelled role=client or role=responder — the servers'
//     own CPU, without the load generator's (not with -cpuprofile).
//
// Every sub-benchmark reports, besides ns/op (wall time per certificate):
// certs/s; p50-ms and p99-ms (one certificate, from new-order to a
// verified chain); B/cert and allocs/cert (runtime.MemStats around the
// timed part); proc-CPU-ms/cert (user+system CPU of the whole process
// around the timed part: the load generator, its challenge responder and
// DNS server share the process with Caddy, so this is an upper bound on
// the server's CPU; a CPU profile splits it, since the client goroutines
// carry the pprof label role=client and the responders role=responder);
// req/cert and polls/cert; non2xx and 5xx (responses of the timed part).
// The relayed ones (relay, relay_prepared) also report upstream-req/cert,
// the relay's requests Pebble served (logged by kind with
// ACMEPROXY_BENCH_PHASES=1), and upstream-conns, the connections Pebble
// accepted in the timed part.
package bench
