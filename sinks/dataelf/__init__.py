"""DataElf: data tasks as plans of typed operators over the factory's LanceDB tables
(:mod:`.operators`: the catalogue and its relational operators; :mod:`.meaning`: those over
meaning and value; :mod:`.plan`: validating, running, saving; :mod:`.planner`: plans from
plain language; :mod:`.private`: runs that let data be used but not seen). Operators
register when :func:`.operators.available` is first asked."""
