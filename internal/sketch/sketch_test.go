package sketch

import "testing"

func TestEstimates(t *testing.T) {
	s := New(1000)
	for range 5 {
		s.Add(42)
	}
	s.Add(7)
	if e := s.Estimate(42); e < 5 {
		t.Fatalf("estimate of 42 = %d, want ≥ 5", e)
	}
	if e := s.Estimate(7); e < 1 || e > 5 {
		t.Fatalf("estimate of 7 = %d", e)
	}
	if e := s.Estimate(99); e > 1 {
		t.Fatalf("estimate of an unseen item = %d", e)
	}
	for range 100 {
		s.Add(42)
	}
	if e := s.Estimate(42); e != 15 {
		t.Fatalf("saturated estimate = %d, want 15", e)
	}
}

func TestAging(t *testing.T) {
	s := New(1000) // halves every 10,000 additions
	for range 10 {
		s.Add(1)
	}
	for range 10000 - 10 {
		s.Add(2)
	}
	if e := s.Estimate(1); e != 5 {
		t.Fatalf("estimate after a halving = %d, want 5", e)
	}
}
