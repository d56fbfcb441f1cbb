"""What a parameter holds, from the arguments every caller of the file passes (core/arguments.py)."""

from __future__ import annotations

import ast
import textwrap

from torch_preflight.core.arguments import Made, callers, param_kind, param_values, values_of
from torch_preflight.core.semantic import Kind, ModuleModel, build
from torch_preflight.core.source import SourceText

HEADER = """
import torch
import torch.nn as nn
from timm.loss import SoftTargetCrossEntropy
from helpers import make_thing


class Net(nn.Module):
    def forward(self, x):
        return x


class Plain:
    pass
"""


def model_of(code: str, script: bool = True) -> ModuleModel:
    text = HEADER + textwrap.dedent(code) + ("\nmain()\n" if script else "")
    return build(ast.parse(text), SourceText(text), "t.py")


def classes(found: frozenset[Made] | None) -> set[tuple[str, str | None]] | None:
    return None if found is None else {(m.kind.value, m.cls) for m in found}


def test_join_over_callers_positional_keyword_and_default() -> None:
    m = model_of(
        """
        def run(model, loss=SoftTargetCrossEntropy(), opt=None):
            pass

        def main():
            net = Net()
            run(net, opt=torch.optim.SGD(net.parameters(), lr=0.1))
            run(model=Net(), loss=nn.CrossEntropyLoss(), opt=torch.optim.Adam([]))
        """
    )
    assert classes(param_values(m, "run", "model")) == {("model", "Net")}
    assert classes(param_values(m, "run", "loss")) == {("loss_fn", "timm.loss.SoftTargetCrossEntropy"), ("loss_fn", "torch.nn.CrossEntropyLoss")}
    assert classes(param_values(m, "run", "opt")) == {("optimizer", "torch.optim.SGD"), ("optimizer", "torch.optim.Adam")}
    assert param_kind(m, "opt", "run") is Kind.OPTIMIZER
    assert m.kind_of("opt", "run") is Kind.OPTIMIZER  # the kind of a parameter comes from its callers


def test_one_unknown_caller_makes_it_unknown() -> None:
    m = model_of(
        """
        def run(solver):
            pass

        def main():
            run(torch.optim.SGD([], lr=0.1))
            run(make_thing())
        """
    )
    assert param_values(m, "run", "solver") is None
    assert param_kind(m, "solver", "run") is None
    assert m.kind_of("solver", "run") is Kind.UNKNOWN  # nothing known: the spelling says nothing either


def test_known_but_different_values_are_no_single_kind() -> None:
    m = model_of(
        """
        def run(model):
            pass

        def main():
            run(Net())
            run(Plain())
        """
    )
    assert classes(param_values(m, "run", "model")) == {("model", "Net"), ("unknown", "Plain")}
    assert m.kind_of("model", "run") is Kind.UNKNOWN  # the callers outrank the spelling


def test_branches_are_joined_and_wrappers_keep_the_wrapped_class() -> None:
    m = model_of(
        """
        def run(module):
            pass

        def main(flag, gpu):
            if flag:
                model = Net().to("cuda")
            else:
                model = Net()
                model = nn.parallel.DistributedDataParallel(model, device_ids=[gpu])
            run(model)
        """
    )
    assert classes(values_of(m, "model", "main")) == {("model", "Net")}
    assert classes(param_values(m, "run", "module")) == {("model", "Net")}


def test_methods_through_self_and_constructors() -> None:
    m = model_of(
        """
        class Trainer:
            def __init__(self, net, opt):
                self.net = net
                self.opt = opt

            def fit(self, batches):
                for b in batches:
                    self._step(self.net, b)

            def _step(self, module, batch):
                return module(batch)

        def main():
            net = Net()
            Trainer(net, torch.optim.AdamW(net.parameters())).fit([])
        """
    )
    assert classes(param_values(m, "Trainer.__init__", "opt")) == {("optimizer", "torch.optim.AdamW")}
    assert m.kind_of("self.opt", "Trainer.fit") is Kind.OPTIMIZER
    assert classes(param_values(m, "Trainer._step", "module")) == {("model", "Net")}


def test_callers_the_file_cannot_see() -> None:
    m = model_of(
        """
        from ignite.engine import Engine

        def update(engine, batch):
            pass

        def spread(model):
            pass

        def inside(model):
            pass

        def varargs(*rest, model=None):
            pass

        def keywords(model, **options):
            pass

        def main():
            Engine(update)
            update(None, Net())
            args = (Net(),)
            spread(*args)
            varargs(Plain(), Net())
            varargs(model=Net())
            keywords(Net(), lr=0.1)
            return [inside(x) for x in [Net()]]
        """
    )
    assert classes(param_values(m, "varargs", "model")) == {("model", "Net")}  # `Plain()` goes to `*rest`; None adds nothing
    assert classes(param_values(m, "keywords", "model")) == {("model", "Net")}  # before the star: positions hold
    assert callers(m, "update") is None  # handed to an engine
    assert callers(m, "spread") is None  # `*args`
    assert callers(m, "inside") is None  # called inside a comprehension, where no event records it


def test_public_functions_of_a_library_module_are_unknown() -> None:
    m = model_of(
        """
        def evaluate(model):
            pass

        def _evaluate(model):
            pass

        def run():
            evaluate(Net())
            _evaluate(Net())
        """,
        script=False,
    )
    assert callers(m, "evaluate") is None  # other modules may import it and pass anything
    assert classes(param_values(m, "_evaluate", "model")) == {("model", "Net")}  # private: every caller is here


def test_none_adds_nothing_and_a_method_of_another_receiver_is_unknown() -> None:
    m = model_of(
        """
        class Agent:
            def _act(self, policy=None):
                pass

            def act(self, policy):
                pass

            def run(self):
                self._act()
                self._act(Net())
                self.act(Net())

        def main(other):
            other._act(make_thing())
        """
    )
    assert callers(m, "Agent._act") is None  # `other._act(...)` may be this method, with anything
    assert callers(m, "Agent.act") is None  # a public method: any `x.act(...)` of any module may be it
    n = model_of(
        """
        def act(policy=None):
            pass

        def main():
            act()
            act(Net())
        """
    )
    assert classes(param_values(n, "act", "policy")) == {("model", "Net")}


def test_an_argument_of_a_closure_is_what_the_enclosing_function_binds() -> None:
    m = model_of(
        """
        def select_action(policy, observation):
            return policy(observation)

        def act(agent, observation):
            return agent(observation)

        def main():
            policy = Net()
            agent = Net()

            def step(engine, batch):
                nonlocal agent
                select_action(policy, batch)
                act(agent, batch)
                agent = Plain()

            Engine(step).run([])
        """
    )
    assert classes(values_of(m, "policy", "main.step")) == {("model", "Net")}
    # the closure runs only when `main` does, which the script runs: the callers are all seen
    assert classes(param_values(m, "select_action", "policy")) == {("model", "Net")}
    assert values_of(m, "agent", "main.step") is None  # re-bound through `nonlocal`
    assert values_of(m, "agent", "main") is None
    assert param_values(m, "act", "agent") is None


def test_a_closure_of_a_library_function_is_not_the_program() -> None:
    m = model_of(
        """
        def select_action(policy, observation):
            return policy(observation)

        def main():
            policy = Net()

            def step(engine, batch):
                select_action(policy, batch)

            Engine(step).run([])
        """,
        script=False,
    )
    assert param_values(m, "select_action", "policy") is None


def test_library_functions_and_methods_that_return_the_module_they_are_given() -> None:
    m = model_of(
        """
        def main():
            clf = Net().apply(init)
            clf = nn.SyncBatchNorm.convert_sync_batchnorm(clf)
            clf = torch.nn.utils.spectral_norm(clf.cuda())
            bn = torch.nn.SyncBatchNorm.convert_sync_batchnorm(nn.BatchNorm2d(3))
            table = make_thing().apply(init)
            odd = nn.SyncBatchNorm.convert_sync_batchnorm(make_thing())
            plain = Plain().type(torch.float16)
        """
    )
    assert classes(values_of(m, "clf", "main")) == {("model", "Net")}
    assert classes(values_of(m, "bn", "main")) == {("model", None)}  # a BatchNorm given alone becomes a new SyncBatchNorm
    assert values_of(m, "table", "main") is None  # `.apply` of something not known to be a module
    assert values_of(m, "odd", "main") is None
    assert values_of(m, "plain", "main") is None


def test_a_global_declaration_makes_the_module_name_unknown() -> None:
    m = model_of(
        """
        net = Net()

        def reset():
            global step, net
            net = make_thing()

        def main():
            print(net)
        """
    )
    assert values_of(m, "net", "main") is None
