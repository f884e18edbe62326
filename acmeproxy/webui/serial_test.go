package webui

import (
	"fmt"
	"html"
	"math/big"
	"regexp"
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

// The search by serial is a list like any other: a page at a time with a
// link to the next, however many CAs issued the serial (a script's
// backend that reuses its serials issues it again and again), each order
// listed once; and the other filters narrow it, as they narrow any search.
func TestTheSearchBySerialIsPagedAndNarrowedByTheOtherFilters(t *testing.T) {
	f := newFixture(t, false)
	const orders = pageLimit + 2
	want := map[string]bool{}
	for i := range orders {
		want[f.issuedBy(t, fmt.Sprintf("n%03d.example.test", i), big.NewInt(1), fmt.Sprintf("ca%04d", i))] = true
	}
	rowRE := regexp.MustCompile(`<tr data-order="([^"]+)">`)
	seen := map[string]int{}
	next := "/ops/orders?serial=01"
	for pages := 1; next != ""; pages++ {
		if pages > orders {
			t.Fatal("the search by serial never ends")
		}
		r := f.get(t, next)
		body := r.Body.String()
		rows := rowRE.FindAllStringSubmatch(body, -1)
		if r.Code != 200 || len(rows) > pageLimit {
			t.Fatalf("page %d of the search by serial: %d with %d orders; want 200 with at most %d", pages, r.Code, len(rows), pageLimit)
		}
		for _, m := range rows {
			seen[m[1]]++
		}
		next = ""
		if m := regexp.MustCompile(`rel="next" href="([^"]+)"`).FindStringSubmatch(body); m != nil {
			next = "/ops/orders" + html.UnescapeString(m[1])
		}
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("order %s listed %d times; want once", id, seen[id])
		}
	}
	if len(seen) != orders {
		t.Errorf("%d orders listed; want the %d of serial 01", len(seen), orders)
	}
	if r := f.get(t, "/ops/orders?serial=01&status=pending"); r.Code != 200 || len(rowRE.FindAllString(r.Body.String(), -1)) != 0 {
		t.Errorf("the valid orders of serial 01 filtered by status pending: %d, %d listed; want none", r.Code, len(rowRE.FindAllString(r.Body.String(), -1)))
	}
}
