"""DataElf: data tasks as plans of typed operators over the factory's LanceDB tables
(:mod:`.operators`: the catalogue; :mod:`.plan`: validating, running, saving)."""
