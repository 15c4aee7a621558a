"""Read-only reports of the command line: `kgwe nodes`, `kgwe profiles`, `kgwe audit`, `kgwe costs`."""
