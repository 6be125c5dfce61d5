// Package edge is where the SDK meets the store: every payload its client
// and its worker's attempt executor write passes through the payload
// stage (package payload: offloading, then encryption) here, and every
// payload they read back is decoded here.
//
// It is the only holder of the store's payload-writing methods (starts,
// signals, schedules, blobs, an attempt's appends and child starts,
// inquiries' arguments and answers), and
// those take only a payload.Encoded, which only the stage makes: a
// payload cannot reach the database unencoded. The rest of the SDK reads
// the store through [Reads], which has none of them, and hands the
// engine's runtime and requests the store itself ([Store.Engine]): what
// they append carries no payload, but what an attempt's handler returns,
// which the [Handler] adapter encodes.
//
// It imports engine, engine/store, engine/pgstore, history and the
// payload packages.
package edge
