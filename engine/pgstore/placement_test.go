package pgstore_test

import (
	"testing"

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/stretchr/testify/require"
)

func TestPlacement(t *testing.T) {
	t.Parallel()
	p, err := pgstore.ParsePlacement([]byte(`{"cells": {"eu": "postgres://u:secret@eu-db:5432/cairn", "us": "postgres://u@us-db/cairn"},
		"namespaces": {"acme": "eu", "globex": "us"}}`))
	require.NoError(t, err)
	name, cell, err := p.CellOf("acme")
	require.NoError(t, err)
	require.Equal(t, "eu", name)
	require.Equal(t, pgstore.Cell{URL: "postgres://u:secret@eu-db:5432/cairn"}, cell)

	// A cell as an object: its listener's own URL besides.
	objects, err := pgstore.ParsePlacement([]byte(`{"cells": {"us": {"url": "postgres://u@bouncer:6432/cairn", "listen_url": "postgres://u@us-db/cairn"}},
		"namespaces": {"globex": "us"}}`))
	require.NoError(t, err)
	_, cell, err = objects.CellOf("globex")
	require.NoError(t, err)
	require.Equal(t, pgstore.Cell{URL: "postgres://u@bouncer:6432/cairn", ListenURL: "postgres://u@us-db/cairn"}, cell)

	_, _, err = p.CellOf("initech")
	require.EqualError(t, err, `namespace "initech" is in no cell of the placement map (it places "acme", "globex"): add it under "namespaces"`)

	for doc, want := range map[string]string{
		`{"cells": {}}`: "placement map: no cells",
		`{"cells": {"eu": "postgres://u:secret@h:5432/db", "us": "postgres://v@h/db?sslmode=disable"}}`:                 `placement map: cells "eu" and "us" are the same database (h:5432/db)`,
		`{"cells": {"eu": "postgres://u@h/db", "us": "postgres://u@h/db"}, "namespaces": {"acme": "eu", "acme": "us"}}`: `placement map: namespaces.acme is named twice`,
		`{"cells": {"eu": "postgres://u@h/db", "eu": "postgres://u@g/db"}}`:                                             `placement map: cells.eu is named twice`,
		`{"cells": {"eu": "postgres://u@h/db"}} {"cells": {}}`:                                                          `placement map: text after the JSON value`,
		`{"cells": {"eu": "postgres://u@h/db"}, "namespaces": {"acme": "us"}}`:                                          `namespace "acme" is placed in cell "us", which it does not define (cells: "eu")`,
		`{"cells": {"eu": "postgres://u:secret@h:notaport/db"}}`:                                                        `cell "eu": its URL does not parse (invalid port)`,
		`{"cells": {"eu": "postgres://u:secret@h/db?pool_max_conns=abc"}}`:                                              `cell "eu": its URL does not parse (cannot parse pool_max_conns (strconv.ParseInt: parsing "abc": invalid syntax))`,
		`{"cells": {"eu": "postgres://u@h/db"}, "namespace": {}}`:                                                       `unknown field "namespace"`,
		`{"cells": {"eu": {"listen_url": "postgres://u@h/db"}}}`:                                                        `cell "eu" has no url`,
		`{"cells": {"eu": {"url": "postgres://u@h/db", "listen": "x"}}}`:                                                `unknown field "listen"`,
		`{"cells": {"eu": {"url": "postgres://u@h/db", "listen_url": "postgres://u:secret@h:x/db"}}}`:                   `cell "eu": its listen_url does not parse`,
	} {
		_, err := pgstore.ParsePlacement([]byte(doc))
		require.ErrorContains(t, err, want, doc)
		require.NotContains(t, err.Error(), "secret", "an error repeats a URL")
	}
}
