"""The Learn panel: a guided tour of the seed's claims, each a real run on this machine."""
