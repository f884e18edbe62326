//go:build unix

package e2e

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	legoacme "github.com/go-acme/lego/v5/acme"
	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/challenge/http01"
	"github.com/go-acme/lego/v5/lego"
	"github.com/go-acme/lego/v5/registration"

	"github.com/acmeproxy/caddy-acme-proxy/internal/pgtest"
	"github.com/acmeproxy/caddy-acme-proxy/jobs"
	"github.com/acmeproxy/caddy-acme-proxy/store"
)

// Splitting roles: two caddy processes on one PostgreSQL database. The
// front end serves profile "split" with `signer delegated` and holds no
// key; the worker mounts the same profile with Caddy's local CA and serves
// no client. certbot and lego talk to the front end only.

const splitProfile = "split"

// splitFrontCaddyfile is the front end's config. ACME is HTTPS (RFC 8555
// §6.1), so it has a serving certificate: from files the test made, for
// 127.0.0.1 only and no CA, named by path — nothing in its config or its
// storage is key material.
const splitFrontCaddyfile = `{
	admin %s
	persist_config off
	auto_https disable_redirects
	default_bind 127.0.0.1
	http_port %d
	storage file_system %q
	acme_proxy {
		database postgres %q
	}
}

https://127.0.0.1:%d {
	tls %q %q
	acme_proxy {
		profile ` + splitProfile + `
		signer  delegated
		validation_ports {
			http %d
		}
		resolvers %s
	}
}
`

// splitWorkerCaddyfile is the worker's config: the same profile with its
// real signer, on a loopback port no client is told about.
const splitWorkerCaddyfile = `{
	admin off
	persist_config off
	auto_https off
	skip_install_trust
	default_bind 127.0.0.1
	storage file_system %q
	acme_proxy {
		database postgres %q
	}
}

http://127.0.0.1:%d {
	acme_proxy {
		profile ` + splitProfile + `
		signer  local_ca
		validation_ports {
			http %d
		}
		resolvers %s
	}
}
`

// splitUser is a lego registration.User.
type splitUser struct {
	key crypto.Signer
	reg *legoacme.ExtendedAccount
}

func (u *splitUser) GetEmail() string                           { return "" }
func (u *splitUser) GetRegistration() *legoacme.ExtendedAccount { return u.reg }
func (u *splitUser) GetPrivateKey() crypto.Signer               { return u.key }

func TestAFrontEndWithoutAnyKeyServesCertbotAndLegoWhileAWorkerSigns(t *testing.T) {
	certbot := needTool(t, "certbot", "install it with `apt-get install --no-install-recommends certbot`")
	dsn := pgtest.DSN(t)
	caddy := buildCaddy(t)
	dnsAddr := startDNS(t, "example.com")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	var (
		frontAdmin   = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		frontPort    = freePort(t)
		workerPort   = freePort(t)
		validatePort = freePort(t)
		frontStorage = t.TempDir()
		workStorage  = t.TempDir()
		home         = t.TempDir()
	)
	env := []string{"HOME=" + home, "XDG_DATA_HOME=" + filepath.Join(home, "data"), "XDG_CONFIG_HOME=" + filepath.Join(home, "config")}
	tlsRoot, tlsCert, tlsKey := servingCert(t)
	frontConfig := fmt.Sprintf(splitFrontCaddyfile, frontAdmin, freePort(t), frontStorage, dsn, frontPort, tlsCert, tlsKey, validatePort, dnsAddr)
	workerConfig := fmt.Sprintf(splitWorkerCaddyfile, workStorage, dsn, workerPort, validatePort, dnsAddr)
	base := fmt.Sprintf("https://127.0.0.1:%d/acme/%s", frontPort, splitProfile)
	client := tlsRoot.client()

	// The test's own look at the store the two processes share.
	db, err := store.OpenPostgres(ctx, dsn, store.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := jobs.NewQueue(db, nil)

	front := startCaddy(t, caddy, frontConfig, env)
	waitHTTP(t, front, client, base+"/directory", http.StatusOK)
	// No worker has ever run: nothing to serve as ca.pem or CRL yet.
	for _, p := range []string{"/ca.pem", "/crl"} {
		if code, body := httpGet(t, client, base+p); code != http.StatusNotFound {
			t.Fatalf("GET %s before any worker: %d %s, want 404", p, code, body)
		}
	}

	// certbot orders through the front end; with no worker its order
	// waits processing, and certbot keeps polling.
	cb := certbotRun{
		bin: certbot, env: slices.Concat(env, []string{"REQUESTS_CA_BUNDLE=" + tlsRoot.file}),
		configDir: t.TempDir(), workDir: t.TempDir(), logsDir: t.TempDir(),
		common: []string{"--non-interactive", "--server", base + "/directory",
			"--http-01-port", strconv.Itoa(validatePort), "--http-01-address", "127.0.0.1"},
	}
	const cbName = "split-cb.example.com"
	certbotDone := make(chan error, 1)
	go func() {
		certbotDone <- cb.runErr(ctx, "certonly", "--standalone", "--agree-tos", "--register-unsafely-without-email", "-d", cbName)
	}()
	cbJob := waitSigningJob(t, ctx, q, "certbot's order", nil)
	probeFront(t, ctx, q, "probe-certbot")
	if j, _ := q.Get(ctx, cbJob.ID); j.Status != store.JobReady || j.Attempts != 0 || j.LastError != "" {
		t.Fatalf("the front end touched certbot's signing job: %s, attempts %d, last error %q", j.Status, j.Attempts, j.LastError)
	}
	if o, err := db.GetOrder(ctx, splitProfile, cbJob.Key); err != nil || o.Status != "processing" {
		t.Fatalf("certbot's order with no worker: %v %v, want processing", o.Status, err)
	}
	select {
	case err := <-certbotDone:
		t.Fatalf("certbot finished with no instance holding the signer: %v", err)
	default:
	}

	// The worker starts: certbot's polling ends with a certificate from
	// the worker's CA.
	worker := startCaddy(t, caddy, workerConfig, env)
	rootFile := filepath.Join(workStorage, "pki", "authorities", "local", "root.crt")
	if err := <-certbotDone; err != nil {
		t.Fatalf("certbot certonly through the front end: %v", err)
	}
	root := readRoot(t, rootFile)
	live := filepath.Join(cb.configDir, "live", cbName)
	cbLeaf := checkCertbotCert(t, live, root, cbName)

	// ca.pem on the front end is the worker's chain, from the store.
	inter, err := readCerts(filepath.Join(workStorage, "pki", "authorities", "local", "intermediate.crt"))
	if err != nil {
		t.Fatal(err)
	}
	code, body := httpGet(t, client, base+"/ca.pem")
	served, _ := pem.Decode(body)
	if code != http.StatusOK || served == nil || !bytes.Equal(served.Bytes, inter[0].Raw) {
		t.Fatalf("GET ca.pem from the front end: %d, want the worker's intermediate first\n%s", code, body)
	}

	// lego issues through the front end while the worker runs.
	legoClient := newSplitLego(t, ctx, client, base+"/directory", validatePort)
	const legoName = "split-lego.example.com"
	first := legoObtain(t, ctx, legoClient, legoName)

	// The worker stops. lego's next order waits processing; the
	// revocations through the front end are recorded at once.
	worker.stop()
	type obtained struct {
		res *certificate.Resource
		err error
	}
	legoDone := make(chan obtained, 1)
	go func() {
		res, err := legoClient.Certificate.Obtain(ctx, certificate.ObtainRequest{Domains: []string{"split-lego2.example.com"}, Bundle: true, KeyType: certcrypto.EC256})
		legoDone <- obtained{res, err}
	}()
	waitSigningJob(t, ctx, q, "lego's second order", func(j store.Job) bool { return j.ID != cbJob.ID })

	if err := cb.runErr(ctx, "revoke", "--cert-path", filepath.Join(live, "cert.pem"), "--reason", "keycompromise", "--no-delete-after-revoke"); err != nil {
		t.Fatalf("certbot revoke through the front end with the worker stopped: %v", err)
	}
	reason := uint(4) // superseded
	if err := legoClient.Certificate.RevokeWithReason(ctx, first.Certificate, &reason); err != nil {
		t.Fatalf("lego revoke through the front end with the worker stopped: %v", err)
	}
	for _, leaf := range []*x509.Certificate{cbLeaf, parseLeaf(t, first.Certificate)} {
		cs, err := db.CertificatesBySerial(ctx, splitProfile, hex.EncodeToString(leaf.SerialNumber.Bytes()))
		if err != nil || len(cs) != 1 || cs[0].RevokedAt.IsZero() {
			t.Fatalf("certificate %x after revoke-cert on the front end: %+v, %v; want it alone, its revocation recorded at once", leaf.SerialNumber, cs, err)
		}
	}

	// The worker is back: lego's order completes, and the CRL the front
	// end serves lists both revocations.
	startCaddy(t, caddy, workerConfig, env)
	got := <-legoDone
	if got.err != nil {
		t.Fatalf("lego's order through the front end after the worker came back: %v", got.err)
	}
	checkLeaf(t, parseLeaf(t, got.res.Certificate), root, got.res.Certificate, "split-lego2.example.com")
	crlDER := fetchCRL(t, base+"/crl", tlsRoot.cert, map[string]int{cbLeaf.SerialNumber.Text(16): 1, parseLeaf(t, first.Certificate).SerialNumber.Text(16): 4})
	crl, err := x509.ParseRevocationList(crlDER)
	if err != nil {
		t.Fatal(err)
	}
	if err := crl.CheckSignatureFrom(inter[0]); err != nil {
		t.Fatalf("the CRL the front end serves is not signed by the worker's CA: %v", err)
	}

	// The front end holds no key: its config names no key and loads no
	// pki app, its only signer is the delegate, and its storage holds no
	// private key.
	checkFrontHoldsNoKey(t, frontAdmin, frontStorage, tlsKey)
}

// checkFrontHoldsNoKey asserts on the front end's running config and
// loaded signers (through its admin API) and on its storage.
func checkFrontHoldsNoKey(t *testing.T, admin, storage, servingKey string) {
	t.Helper()
	code, cfg := httpGet(t, http.DefaultClient, "http://"+admin+"/config/")
	if code != http.StatusOK {
		t.Fatalf("GET /config/: %d %s", code, cfg)
	}
	var conf struct {
		Apps map[string]json.RawMessage `json:"apps"`
	}
	if err := json.Unmarshal(cfg, &conf); err != nil {
		t.Fatal(err)
	}
	if _, ok := conf.Apps["pki"]; ok {
		t.Errorf("the front end's config has a pki app")
	}
	if n := bytes.Count(cfg, []byte(`"signer":`)); n != 1 || !bytes.Contains(cfg, []byte(`"signer":{"module":"delegated"}`)) {
		t.Errorf("the front end's config has %d signers, want exactly {\"module\":\"delegated\"}:\n%s", n, cfg)
	}
	for _, s := range []string{"-----BEGIN", "PRIVATE KEY", "root.key", "intermediate.key"} {
		if bytes.Contains(cfg, []byte(s)) {
			t.Errorf("the front end's config holds %q:\n%s", s, cfg)
		}
	}
	// The one key it names is its TLS serving key, by path.
	if n := bytes.Count(cfg, []byte(`"key":`)); n != 1 || !bytes.Contains(cfg, []byte(`"key":`+strconv.Quote(servingKey))) {
		t.Errorf("the front end's config names %d keys, want its serving key %s alone:\n%s", n, servingKey, cfg)
	}
	code, body := httpGet(t, http.DefaultClient, "http://"+admin+"/acme_proxy/profiles")
	if code != http.StatusOK {
		t.Fatalf("GET /acme_proxy/profiles: %d %s", code, body)
	}
	var profiles []struct {
		Name       string `json:"name"`
		Signer     string `json:"signer"`
		Revocation string `json:"revocation"`
		CRL        bool   `json:"crl"`
	}
	if err := json.Unmarshal(body, &profiles); err != nil {
		t.Fatalf("profiles: %v\n%s", err, body)
	}
	if len(profiles) != 1 || profiles[0].Name != splitProfile || profiles[0].Signer != "delegated" || profiles[0].Revocation != "delegated" || !profiles[0].CRL {
		t.Errorf("the front end's loaded signers: %s; want profile %s with the delegate alone, serving the CRL its worker published", body, splitProfile)
	}
	err := filepath.WalkDir(storage, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte("PRIVATE KEY")) || strings.HasSuffix(path, ".key") {
			t.Errorf("the front end's storage holds a key: %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitSigningJob waits for a signer_issue job of the split profile that
// also satisfies match (nil: any), and returns it.
func waitSigningJob(t *testing.T, ctx context.Context, q *jobs.Queue, what string, match func(store.Job) bool) store.Job {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		js, err := q.List(ctx, store.JobFilter{Kind: "signer_issue"})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range js {
			if j.Lane == "signer:"+splitProfile && (match == nil || match(j)) {
				return j
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no signer_issue job for %s", what)
		}
	}
}

// probeFront proves that the front end's runner has claimed signer_issue
// jobs since now: a job in the default lane, for a profile nobody mounts,
// is claimed (and put back) by it, the only runner running. The claim
// that took it would have taken any other due signer_issue job it may.
func probeFront(t *testing.T, ctx context.Context, q *jobs.Queue, key string) {
	t.Helper()
	probe, _, err := q.Enqueue(ctx, jobs.Spec{Kind: "signer_issue", Key: key, Payload: map[string]string{"profile": "nowhere", "order": key}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		j, err := q.Get(ctx, probe.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.LastError != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the front end's runner never claimed the probe")
		}
	}
}

func waitHTTP(t *testing.T, p *caddyProc, client *http.Client, url string, want int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		select {
		case <-p.exited:
			t.Fatalf("caddy exited before %s answered: %v", url, p.err)
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer %d: %v", url, want, err)
		}
	}
}

func httpGet(t *testing.T, client *http.Client, url string) (int, []byte) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

func readRoot(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	certs, err := readCerts(file)
	if err != nil {
		t.Fatalf("the worker's root: %v", err)
	}
	return certs[0]
}

func newSplitLego(t *testing.T, ctx context.Context, hc *http.Client, dir string, httpPort int) *lego.Client {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	user := &splitUser{key: key}
	cfg := lego.NewConfig(user)
	cfg.CADirURL = dir
	cfg.HTTPClient = hc
	cfg.UserAgent = "caddy-acme-proxy-e2e"
	client, err := lego.NewClient(cfg)
	if err != nil {
		t.Fatalf("lego.NewClient: %v", err)
	}
	if err := client.Challenge.SetHTTP01Provider(http01.NewProviderServer("127.0.0.1", strconv.Itoa(httpPort))); err != nil {
		t.Fatal(err)
	}
	if user.reg, err = client.Registration.Register(ctx, registration.RegisterOptions{TermsOfServiceAgreed: true}); err != nil {
		t.Fatalf("lego Register: %v", err)
	}
	return client
}

func legoObtain(t *testing.T, ctx context.Context, c *lego.Client, name string) *certificate.Resource {
	t.Helper()
	res, err := c.Certificate.Obtain(ctx, certificate.ObtainRequest{Domains: []string{name}, Bundle: true, KeyType: certcrypto.EC256})
	if err != nil {
		t.Fatalf("lego Obtain %s: %v", name, err)
	}
	return res
}

func parseLeaf(t *testing.T, chainPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(chainPEM)
	if b == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkLeaf verifies leaf, with the rest of chainPEM as intermediates, up
// to root for name.
func checkLeaf(t *testing.T, leaf, root *x509.Certificate, chainPEM []byte, name string) {
	t.Helper()
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root)
	inter.AppendCertsFromPEM(chainPEM)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: inter}); err != nil {
		t.Fatalf("lego's certificate for %s does not verify up to the worker's root: %v", name, err)
	}
	if !slices.Equal(leaf.DNSNames, []string{name}) {
		t.Fatalf("lego's certificate names %v, want %s", leaf.DNSNames, name)
	}
}

// runErr is run that returns certbot's failure instead of failing the
// test (for a certbot run in a goroutine).
func (c certbotRun) runErr(ctx context.Context, args ...string) error {
	args = slices.Concat(args, []string{"--config-dir", c.configDir, "--work-dir", c.workDir, "--logs-dir", c.logsDir}, c.common)
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = append(os.Environ(), c.env...)
	inOwnGroup(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.logsDir, "letsencrypt.log"))
		return fmt.Errorf("certbot %s: %w\noutput:\n%s\nlog:\n%s", args[0], err, out, log)
	}
	return nil
}

// testRoot is the CA of the front end's serving certificate.
type testRoot struct {
	cert *x509.Certificate
	file string // PEM
}

func (r testRoot) client() *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(r.cert)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// servingCert makes a TLS serving certificate for 127.0.0.1 (not a CA)
// under a throwaway root, and returns the root and the files of the
// certificate and its key.
func servingCert(t *testing.T) (root testRoot, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "split e2e TLS root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	root.cert, _ = x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root.cert, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	root.file, certFile, keyFile = filepath.Join(dir, "root.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "serving-key.pem")
	for file, block := range map[string]*pem.Block{
		root.file: {Type: "CERTIFICATE", Bytes: caDER},
		certFile:  {Type: "CERTIFICATE", Bytes: der},
		keyFile:   {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root, certFile, keyFile
}
