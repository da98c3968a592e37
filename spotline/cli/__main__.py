"""`python -m spotline.cli`: the same as the `spotline` command."""

from spotline.cli import app

app()
