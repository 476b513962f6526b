package main

import (
	"context"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector"
)

// TestReplayPlayingShowsLateFrames: while a replay plays, an answer of a
// cursor the ticks have already moved past (a frame slower than a tick) is
// shown, and the cursor's own frame asked for; dropping every late answer
// froze the screen.
func TestReplayPlayingShowsLateFrames(t *testing.T) {
	rec := workloadRecording(t)
	tc := &topCmd{window: "10s", layer: collector.LayerMax, sortKey: "occupancy", interval: time.Second}
	tc.replay = newReplayPlayer(rec)
	m := newTopModel(context.Background(), tc, tc.replay, "recording", false)
	m.replay, m.paused = tc.replay, false
	late := rec.topAt(tc.replay.now().Add(-time.Second), tc.query())
	m.inFlight = true
	_, cmd := m.Update(answerMsg{resp: late, at: time.Now()})
	if !m.have || !m.resp.At.Equal(late.At) {
		t.Errorf("a late frame while playing is dropped: have %v, showing %v, late %v", m.have, m.resp.At, late.At)
	}
	if cmd == nil {
		t.Error("no frame asked for at the cursor after a late one")
	}
}

// slowDetailer answers the ranking at once and counts detail requests.
type slowDetailer struct{ asked []string }

func (s *slowDetailer) top(context.Context, collector.TopQuery) (collector.TopResponse, error) {
	return collector.TopResponse{At: time.Now(), Rows: []collector.TopRow{{Tag: "hog"}, {Tag: "browse"}}}, nil
}

func (s *slowDetailer) tagDetail(_ context.Context, tag string) (collector.TagDetail, error) {
	s.asked = append(s.asked, tag)
	return collector.TagDetail{Tag: tag}, nil
}

// TestDrillDownAsksOneDetailAtATime: refreshes while a detail request is
// in flight ask no other (a slow collector got one per refresh, piling
// up); an answer older than the newest request is not shown; a drill into
// another tag asks at once.
func TestDrillDownAsksOneDetailAtATime(t *testing.T) {
	src := &slowDetailer{}
	tc := &topCmd{window: "10s", layer: collector.LayerMax, sortKey: "occupancy", interval: time.Second}
	m := newTopModel(context.Background(), tc, src, "collector", false)
	m.drill = "hog"
	first := m.fetchDetail()
	if first == nil {
		t.Fatal("no detail asked for on drilling in")
	}
	for range 3 { // refreshes while the first is in flight
		if c := m.fetchDetail(); c != nil {
			t.Fatal("a second detail request while one is in flight")
		}
	}
	old := first().(detailMsg)
	m.drill = "browse" // drilled out and into another tag meanwhile
	second := m.fetchDetail()
	if second == nil {
		t.Fatal("a drill into another tag waits for the old tag's answer")
	}
	m.Update(old)
	if m.detail != nil {
		t.Errorf("the old tag's late answer is shown: %+v", m.detail)
	}
	m.Update(second().(detailMsg))
	if m.detail == nil || m.detail.Tag != "browse" {
		t.Errorf("detail %+v; want browse's", m.detail)
	}
	if len(src.asked) != 2 {
		t.Errorf("%d detail requests (%v), want 2", len(src.asked), src.asked)
	}
}
