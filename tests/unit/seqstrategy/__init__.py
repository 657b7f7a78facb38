"""A strategy added the way a contributor adds one (tests/unit/test_add_strategy.py): a pure planner module, a
strategy module with its ``Strategy`` subclass, and the registration (here ``@register`` on import; in the
package, the module's name in ``dlbench.strategies._load_builtins``). Nothing else in dlbench is touched."""
