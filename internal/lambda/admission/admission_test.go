package admission_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sfnlimit/sfnlimit/internal/lambda/admission"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
	"github.com/sfnlimit/sfnlimit/internal/tools/testmoto"
)

var moto *dynamodb.Client

func TestMain(m *testing.M) { os.Exit(testmoto.RunDynamoDB(m, &moto)) }

// forBoth runs f on moto and on the in-memory table the starter's tests use.
func forBoth(t *testing.T, f func(t *testing.T, s *admission.Store)) {
	t.Run("dynamodb", func(t *testing.T) {
		f(t, admission.NewStore(moto, testmoto.Table(t, moto, "admission")))
	})
	t.Run("fake", func(t *testing.T) {
		f(t, admission.NewStore(fakes.NewDynamoDB("t"), "t"))
	})
}

var (
	t0  = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	job = admission.Job{Type: "sync", Sender: "AROAPRODUCER:p", Key: "acme", ID: "j2", SubmittedAt: t0}
)

// Whichever fate is written first stands: a skipped job is never admitted (another copy of its
// message must not send it to a lane), and an admitted job is never skipped.
func TestFirstFateStands(t *testing.T) {
	forBoth(t, func(t *testing.T, s *admission.Store) {
		ctx := context.Background()
		skipped, other := job, job
		other.ID = "j3"
		if ok, _, err := s.Skip(ctx, skipped, "j1", t0); err != nil || !ok {
			t.Fatalf("Skip = %v, %v; want true", ok, err)
		}
		if err := s.Admit(ctx, skipped, t0); !errors.Is(err, admission.ErrSkipped) {
			t.Fatalf("Admit of a skipped job = %v; want ErrSkipped", err)
		}
		if err := s.Admit(ctx, other, t0); err != nil {
			t.Fatalf("Admit = %v", err)
		}
		if ok, _, err := s.Skip(ctx, other, "j1", t0); err != nil || ok {
			t.Fatalf("Skip of an admitted job = %v, %v; want false", ok, err)
		}
	})
}

// A write made twice (DynamoDB applied it and answered as failed, and it was made again; or two
// copies of one message) succeeds: its own fate found is no conflict.
func TestFateWrittenAgainSucceeds(t *testing.T) {
	forBoth(t, func(t *testing.T, s *admission.Store) {
		ctx := context.Background()
		admitted, skipped := job, job
		skipped.ID = "j9"
		for i := range 2 {
			if err := s.Admit(ctx, admitted, t0); err != nil {
				t.Fatalf("Admit = %v", err)
			}
			// Only the write that made the skip is its first: the one that counts it.
			if ok, first, err := s.Skip(ctx, skipped, "j1", t0.Add(time.Second)); err != nil || !ok || first != (i == 0) {
				t.Fatalf("Skip #%d = %v, first %v, %v; want true, first %v", i+1, ok, first, err, i == 0)
			}
		}
		fates, err := s.Find(ctx, skipped.Type, skipped.Sender, skipped.Key, skipped.ID)
		if err != nil || len(fates) != 1 || fates[0].Outcome != admission.Skipped || fates[0].Behind != "j1" || !fates[0].At.Equal(t0.Add(time.Second)) {
			t.Fatalf("Find = %+v, %v; want one skipped behind j1", fates, err)
		}
	})
}

// A producer may send an id again once its job ended: another submission (a later SubmittedAt) or
// generation (a redrive) has a fate of its own, and Find lists them all, oldest first. Another
// sender's or key's job of the same id is another job.
func TestEachSubmissionHasItsOwnFate(t *testing.T) {
	forBoth(t, func(t *testing.T, s *admission.Store) {
		ctx := context.Background()
		first, again, redriven, otherSender, otherKey := job, job, job, job, job
		again.SubmittedAt = t0.Add(time.Hour)
		redriven.Redrive = 1
		otherSender.Sender = "AROATENANTB:q"
		otherKey.Key = "acme2"
		if ok, _, err := s.Skip(ctx, first, "j1", t0); err != nil || !ok {
			t.Fatalf("Skip = %v, %v", ok, err)
		}
		for _, j := range []admission.Job{again, redriven, otherSender, otherKey} {
			if err := s.Admit(ctx, j, t0); err != nil {
				t.Fatalf("Admit(%+v) = %v; want nil: another submission", j, err)
			}
		}
		fates, err := s.Find(ctx, job.Type, job.Sender, job.Key, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range fates {
			got = append(got, f.Outcome)
		}
		if len(fates) != 3 || fates[0].Outcome != admission.Skipped || !fates[0].SubmittedAt.Equal(t0) ||
			fates[1].Redrive != 0 || !fates[1].SubmittedAt.Equal(again.SubmittedAt) || fates[2].Redrive != 1 {
			t.Fatalf("Find = %v (%+v); want skipped, then the later submission, then the redrive", got, fates)
		}
	})
}

// A fate written again later (a later delivery of a skipped job's message, its key's older job
// another one by then) keeps its first time and reason: job show names the job it was skipped behind
// when it was skipped, not the one a redelivery found.
func TestFateWrittenAgainKeepsItsFirstTimeAndReason(t *testing.T) {
	forBoth(t, func(t *testing.T, s *admission.Store) {
		ctx := context.Background()
		if ok, _, err := s.Skip(ctx, job, "j1", t0); err != nil || !ok {
			t.Fatalf("Skip = %v, %v; want true", ok, err)
		}
		if ok, _, err := s.Skip(ctx, job, "j0", t0.Add(time.Minute)); err != nil || !ok {
			t.Fatalf("Skip again = %v, %v; want true", ok, err)
		}
		fates, err := s.Find(ctx, job.Type, job.Sender, job.Key, job.ID)
		if err != nil || len(fates) != 1 || fates[0].Behind != "j1" || !fates[0].At.Equal(t0) {
			t.Fatalf("Find = %+v, %v; want one skipped behind j1 at %s", fates, err, t0)
		}
	})
}
