package pgstore

import "time"

// SQL returns the text the store runs for the named query, for tests.
func (s *Store) SQL(name string) string { return s.sql(name) }

// ValuerArrays holds ids, ints, texts and times in the arrays of arrays.go:
// uuid[], bigint[], integer[], text[], timestamptz[], and timestamptz[]
// with the zero times NULL.
func ValuerArrays(ids [][16]byte, ints []int32, texts []string, times []time.Time) []any {
	u, i8, i4, tx, ts, nts := uuidArray{}, int8Array{}, int4Array{}, textArray{}, timeArray{}, nullTimeArray{}
	for _, id := range ids {
		u = append(u, uuidElem(id))
	}
	for _, n := range ints {
		i8, i4 = append(i8, int8Elem(n)), append(i4, int4Elem(n))
	}
	for _, s := range texts {
		tx = append(tx, textElem(s))
	}
	for _, t := range times {
		ts, nts = append(ts, timeElem(t)), append(nts, nullTimeElem(t))
	}
	return []any{u, i8, i4, tx, ts, nts}
}
