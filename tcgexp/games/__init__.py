"""The games tcgexp trains on, each in a wing of its own: ``sim`` (the built-in simulator) and ``cabt`` (the
real game, Kaggle's card battle; extra ``cabt``). ``registry`` names them for ``dataset.game``; what a game
offers the rest of tcgexp (its rows, its days, its arena) is the ``Game`` protocol (``base``). Importing this
package loads no game."""
