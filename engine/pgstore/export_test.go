package pgstore

// SQL returns the text the store runs for the named query, for tests.
func (s *Store) SQL(name string) string { return s.sql(name) }
