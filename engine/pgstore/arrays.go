package pgstore

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Array parameters whose elements pgx encodes without allocating.
//
// pgx encodes a []T parameter by handing each element to the element's
// encoder as an interface value: for time.Time, [16]byte, int64 and
// string that is an allocation per element (two for times, which it
// wraps again), some 20 per task in a batched append. valuerArray hands
// over a pointer to the element instead, which an interface holds as it
// is, and the element types implement the valuer interfaces pgx's codecs
// read them through. Measured with cairn bench throughput -n 100000
// --memprofile (see docs/notes/2026-12-06-storage-step.md).
type valuerArray[E any, P interface{ *E }] []E

// Dimensions implements [pgtype.ArrayGetter]: one dimension, empty rather
// than NULL when there are no elements.
func (a valuerArray[E, P]) Dimensions() []pgtype.ArrayDimension {
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

// Index implements [pgtype.ArrayGetter].
func (a valuerArray[E, P]) Index(i int) any { return P(&a[i]) }

// IndexType implements [pgtype.ArrayGetter].
func (a valuerArray[E, P]) IndexType() any { return P(nil) }

type (
	uuidArray     = valuerArray[uuidElem, *uuidElem]
	int8Array     = valuerArray[int8Elem, *int8Elem]
	int4Array     = valuerArray[int4Elem, *int4Elem]
	textArray     = valuerArray[textElem, *textElem]
	timeArray     = valuerArray[timeElem, *timeElem]
	nullTimeArray = valuerArray[nullTimeElem, *nullTimeElem]
)

// uuidElem is a uuid element.
type uuidElem [16]byte

func (e *uuidElem) UUIDValue() (pgtype.UUID, error) { return pgtype.UUID{Bytes: *e, Valid: true}, nil }

// int8Elem is a bigint element.
type int8Elem int64

func (e *int8Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

// int4Elem is an integer element.
type int4Elem int32

func (e *int4Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

// textElem is a text element.
type textElem string

func (e *textElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

// timeElem is a timestamptz element.
type timeElem time.Time

func (e *timeElem) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*e), Valid: true}, nil
}

// nullTimeElem is a timestamptz element that may be NULL (the zero time).
type nullTimeElem time.Time

func (e *nullTimeElem) TimestamptzValue() (pgtype.Timestamptz, error) {
	t := time.Time(*e)
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}, nil
}
