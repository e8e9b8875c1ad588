"""The recipes: how a run quantizes the GEMMs of its linear layers (torch-free; the
numerics themselves are in trainers/precision/). One module per part, each importing
only those above it:

    operands.py   how one GEMM operand is quantized (OperandQuant), the operands of the table
    options.py    the options of each family of recipes (RecipeOptions...) and how they set
                  its operands; ADDED_LATER, the options that enter run keys off their defaults
    config.py     a recipe (RecipeConfig, its Switch), RecipeError, the reference, comparisons
    named.py      the table of named recipes (RECIPES, get_recipe) and the names a campaign may give
    written.py    a recipe written in the campaign file by its operands; the grammar
    switch.py     a recipe's switch to another recipe at a token count, read and checked
    resolve.py    a campaign's recipe entry into its options (validate_recipe_options) and
                  its config (resolve_recipe): the one place that recurses into a switch target

Import from the module that defines a name (`from rcpforge.trainers.recipes.resolve import
resolve_recipe`); this package re-exports nothing."""
