package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// processingOrder returns an order claimed for issue, as finalize leaves it
// before it calls the relay signer.
func processingOrder(t *testing.T, db *DB) Order {
	t.Helper()
	o := newOrderWithAuthzs(t, db, 1)
	if _, err := rawW(db).Exec(`UPDATE orders SET status = 'ready' WHERE id = ?`, o.ID); err != nil {
		t.Fatal(err)
	}
	if won, err := db.ClaimOrderForIssue(context.Background(), o.ID, []byte("csr"), OrderClient{}, "", t0); err != nil || !won {
		t.Fatalf("claim: %v %v", won, err)
	}
	return o
}

func TestARelayOrderIsMappedOnceAndReadWithItsLocalOrder(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		o := processingOrder(t, db)
		n := NewRelayOrder{OrderID: o.ID, Profile: "p", CSR: []byte{1, 2, 3}, ClientAddr: "10.0.0.7", UserAgent: "lego"}

		r, created, err := db.CreateRelayOrder(ctx, n, t0)
		if err != nil || !created {
			t.Fatalf("first mapping: created=%v err=%v", created, err)
		}
		if r.Status != RelayProcessing || r.OrderStatus != "processing" || r.UpstreamOrderURL != "" ||
			string(r.CSR) != "\x01\x02\x03" || r.ClientAddr != "10.0.0.7" || r.UserAgent != "lego" {
			t.Errorf("mapping = %+v", r)
		}
		if len(r.Identifiers) != 1 || r.Identifiers[0].Value != "a.example.com" || !r.Expires.Equal(t0.Add(time.Hour)) {
			t.Errorf("local order fields = %v, expires %v", r.Identifiers, r.Expires)
		}

		n.CSR = []byte("other")
		again, created, err := db.CreateRelayOrder(ctx, n, t0.Add(time.Minute))
		if err != nil || created {
			t.Fatalf("second mapping: created=%v err=%v; want the first one back", created, err)
		}
		if string(again.CSR) != "\x01\x02\x03" {
			t.Errorf("second mapping replaced the CSR: %q", again.CSR)
		}
	})
}

func TestTheFirstUpstreamOrderRecordedWins(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		o := processingOrder(t, db)
		if _, _, err := db.CreateRelayOrder(ctx, NewRelayOrder{OrderID: o.ID, Profile: "p", CSR: []byte{1}}, t0); err != nil {
			t.Fatal(err)
		}
		got, err := db.SetRelayUpstreamOrder(ctx, o.ID, "https://ca/order/1", t0)
		if err != nil || got != "https://ca/order/1" {
			t.Fatalf("first: %q %v", got, err)
		}
		got, err = db.SetRelayUpstreamOrder(ctx, o.ID, "https://ca/order/2", t0)
		if err != nil || got != "https://ca/order/1" {
			t.Fatalf("second: %q %v; want the first URL kept", got, err)
		}
		if _, err := db.SetRelayUpstreamOrder(ctx, "nope", "https://ca/order/3", t0); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown order: %v; want ErrNotFound", err)
		}
	})
}

func TestAnUpstreamOrderIsReplacedOnlyWhileTheOneReplacedIsRecorded(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		o := processingOrder(t, db)
		if _, _, err := db.CreateRelayOrder(ctx, NewRelayOrder{OrderID: o.ID, Profile: "p", CSR: []byte{1},
			UpstreamOrderURL: "https://ca/order/prepared"}, t0); err != nil {
			t.Fatal(err)
		}
		got, err := db.ReplaceRelayUpstreamOrder(ctx, o.ID, "https://ca/order/prepared", "https://ca/order/1", t0)
		if err != nil || got != "https://ca/order/1" {
			t.Fatalf("first: %q %v; want the replacement recorded", got, err)
		}
		got, err = db.ReplaceRelayUpstreamOrder(ctx, o.ID, "https://ca/order/prepared", "https://ca/order/2", t0)
		if err != nil || got != "https://ca/order/1" {
			t.Fatalf("second: %q %v; want the first replacement kept", got, err)
		}
		if _, err := db.ReplaceRelayUpstreamOrder(ctx, "nope", "https://ca/order/prepared", "https://ca/order/3", t0); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown order: %v; want ErrNotFound", err)
		}
	})
}

func TestARelayMappedWithAPreparedUpstreamOrderCarriesItAndKeepsIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		o := processingOrder(t, db)
		r, created, err := db.CreateRelayOrder(ctx, NewRelayOrder{OrderID: o.ID, Profile: "p", CSR: []byte{1},
			UpstreamOrderURL: "https://ca/order/prepared"}, t0)
		if err != nil || !created || r.UpstreamOrderURL != "https://ca/order/prepared" {
			t.Fatalf("mapping: %+v created=%v err=%v; want the prepared upstream order", r, created, err)
		}
		got, err := db.SetRelayUpstreamOrder(ctx, o.ID, "https://ca/order/other", t0)
		if err != nil || got != "https://ca/order/prepared" {
			t.Errorf("recording another upstream order: %q %v; want the prepared one kept", got, err)
		}
	})
}

func TestRelaysInFlightAreThoseStillProcessingOnBothSides(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := context.Background()
		db := openTest(t)
		var ids []string
		for i := 0; i < 3; i++ {
			o := processingOrder(t, db)
			if _, _, err := db.CreateRelayOrder(ctx, NewRelayOrder{OrderID: o.ID, Profile: "p", CSR: []byte{1}}, t0); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, o.ID)
		}
		// The first relay finished; the second's local order was failed by
		// its settler but the mapping was not yet settled (a crash between).
		if err := db.SettleRelayOrder(ctx, ids[0], RelayValid, "", t0); err != nil {
			t.Fatal(err)
		}
		if err := db.FailOrder(ctx, ids[1], nil, "upstream said no", t0); err != nil {
			t.Fatal(err)
		}
		inFlight, err := db.ProcessingRelayOrders(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		if len(inFlight) != 1 || inFlight[0].OrderID != ids[2] {
			t.Errorf("in flight = %v; want only %s", inFlight, ids[2])
		}
		if other, _ := db.ProcessingRelayOrders(ctx, "q"); len(other) != 0 {
			t.Errorf("profile q has %d relays in flight; want none", len(other))
		}

		// Settling is guarded: a settled relay keeps its first outcome.
		if err := db.SettleRelayOrder(ctx, ids[0], RelayInvalid, "late abandon", t0); err != nil {
			t.Fatal(err)
		}
		r, err := db.GetRelayOrder(ctx, ids[0])
		if err != nil || r.Status != RelayValid || r.Detail != "" {
			t.Errorf("settled relay = %+v, %v; want valid, untouched", r, err)
		}
		r, err = db.GetRelayOrder(ctx, ids[1])
		if err != nil || r.FailureDetail != "upstream said no" {
			t.Errorf("failure detail = %q, %v", r.FailureDetail, err)
		}
		if err := db.SettleRelayOrder(ctx, ids[2], RelayProcessing, "", t0); err == nil {
			t.Error("settling as processing: want an error")
		}
	})
}
