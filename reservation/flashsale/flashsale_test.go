package flashsale

import (
	"testing"
	"time"

	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestSaleBalances(t *testing.T) {
	for _, s := range []reservation.Strategy{reservation.StrategySkipLocked, reservation.StrategyCounter} {
		t.Run(string(s), func(t *testing.T) {
			db := testenv.NewDatabase(t).Open(t)
			r, err := Run(t.Context(), Config{DB: db, Strategy: s, Buyers: 300, Concurrency: 8, Items: 3, Locations: 2,
				Stock: 40, CartSize: 2, PoolSize: 20, AbandonRate: 0.2, PaymentDelay: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", r)
			if r.Oversold != 0 || r.Leaked != 0 || r.Undersold != 0 || r.FailedCalls != 0 {
				t.Errorf("books do not balance: %+v", r)
			}
			if r.Sold == 0 || r.Reserves == 0 {
				t.Errorf("nothing sold: %+v", r)
			}
		})
	}
}
