"""The vocabulary every layer shares: errors, ops and dtypes, the x/out buffer contract, the
schedule IR, topology. numpy only: nothing here talks to MPI."""
