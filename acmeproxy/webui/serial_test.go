package webui

import (
	"math/big"
	"strings"
	"testing"
)

// A serial is unique per issuing CA only: when two CAs issued it, the
// orders page's search by serial lists both orders, and each order's page
// names its certificate's issuer.
func TestTheSearchBySerialListsTheOrderOfEveryCAThatIssuedItAndEachOrderNamesItsIssuer(t *testing.T) {
	f := newFixture(t, false)
	first := f.issuedBy(t, "one.example.test", big.NewInt(1), "aa11")
	second := f.issuedBy(t, "two.example.test", big.NewInt(1), "bb22")
	r := f.get(t, "/ops/orders?serial=01")
	if body := r.Body.String(); r.Code != 200 || !strings.Contains(body, first) || !strings.Contains(body, second) {
		t.Errorf("the orders of serial 01: %d, want 200 listing %s and %s:\n%s", r.Code, first, second, body)
	}
	for order, issuer := range map[string]string{first: "aa11", second: "bb22"} {
		r := f.get(t, "/ops/orders/"+order)
		if want := `<code id="issuer">` + issuer + `</code>`; r.Code != 200 || !strings.Contains(r.Body.String(), want) {
			t.Errorf("the page of order %s: %d, want 200 with %s:\n%s", order, r.Code, want, r.Body.String())
		}
	}
}
