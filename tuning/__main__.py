"""``python -m tuning`` runs the ``fabtune`` command."""

from tuning.cli import main

main()
