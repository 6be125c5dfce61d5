package history

// BlobRef is a payload kept out of the history: the history holds this
// reference, the bytes are in a blob store (the database's blobs table).
// A reader checks the bytes against Size and SHA256 before using them.
type BlobRef struct {
	// Store names where the bytes are: "db", the database's blobs table.
	Store string `json:"store"`
	// Key names the blob in its store, within the task's namespace.
	Key string `json:"key"`
	// Size is the length of the bytes.
	Size int64 `json:"size"`
	// SHA256 is the hex SHA-256 digest of the bytes.
	SHA256 string `json:"sha256"`
	// ContentType is the media type the writer gave, when it gave one.
	ContentType string `json:"content_type,omitempty"`
}

// BlobStoreDB is [BlobRef.Store] for the database's own blobs table.
const BlobStoreDB = "db"
