package job

import (
	"fmt"
	"regexp"
)

// Batches: a job may belong to a batch (an id), which closes when every one of its jobs has ended
// (internal/lambda/batch). A batch is opened with its size by a job carrying batchSize, or
// beforehand by `sfnlimit submit --batch` or `sfnlimit batch open`.
const (
	// MaxBatchLen is the longest batch id: its ledger items' keys are "BATCH#{id}#S{k}".
	MaxBatchLen = 64
	// MaxBatchSize is the most jobs a batch holds.
	MaxBatchSize = 1_000_000
)

// Reasons a job of a batch is refused.
const (
	// ReasonInvalidBatch: the batch id or size is out of the contract, or the batch is open with
	// another size.
	ReasonInvalidBatch Reason = "invalid_batch"
	// ReasonBatchNotOpen: the job names a batch that nobody opened (no job carried batchSize).
	ReasonBatchNotOpen Reason = "batch_not_open"
	// ReasonBatchNotOwned: the job names a batch that another sender opened (its SQS SenderId's
	// principal is not the batch's owner): it is refused and not counted in that batch.
	ReasonBatchNotOwned Reason = "batch_not_owned"
)

var batchRe = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// ValidateBatch checks a batch id and size ("" and 0: no batch; a size needs an id).
func ValidateBatch(batch string, size int) error {
	if batch != "" && !batchRe.MatchString(batch) {
		return &Error{ReasonInvalidBatch, fmt.Sprintf("batch %q must be 1-%d characters of A-Z a-z 0-9 _ - . :", clip(batch), MaxBatchLen)}
	}
	if size < 0 || size > MaxBatchSize {
		return &Error{ReasonInvalidBatch, fmt.Sprintf("batchSize %d must be 1-%d", size, MaxBatchSize)}
	}
	if size > 0 && batch == "" {
		return &Error{ReasonInvalidBatch, fmt.Sprintf("batchSize %d is given without a batch", size)}
	}
	return nil
}

// BatchJobID is how a batch's ledger names a job: its id is unique within its type and key, and a
// batch may hold jobs of several types and keys. A job without a key is "{type}/{id}", as before
// keys were part of it; one with a key is "{type}/{id}/{key}" (neither a type nor an id has a "/"),
// its key's hash "{type}/{id}/#{hash}" when the key is out of the contract (a refused job's).
func BatchJobID(typ, key, id string) string {
	switch {
	case key == "":
		return typ + "/" + id
	case ValidateKey(key) != nil:
		return typ + "/" + id + "/#" + hash(key, 16)
	}
	return typ + "/" + id + "/" + key
}
