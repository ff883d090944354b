"""Silver: current aspect state and typed Entity Change Events."""
