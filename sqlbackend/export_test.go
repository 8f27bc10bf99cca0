package sqlbackend

// Table returns the backend's table name, for tests that write rows.
func (b *Backend) Table() string { return b.sql.table }
