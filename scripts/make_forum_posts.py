"""Make data/sample/forum-posts.jsonl: forum and blog posts written by the project
(CC0-1.0) that quote items of the bundled eval sets (data/evalsets/) and carry fake
personal data, with a machine-readable answer key in each record's ``meta``.

The posts' own text is below; the quoted items are read from data/evalsets/ and
transformed by the named variant, so the quotes and the key cannot drift apart.
Run from the repo root after scripts/make_evalsets.py:

    .venv/bin/python scripts/make_forum_posts.py

Answer key (``meta``), see data/sample/README.md:
  planted:   [{eval_set, item, variant, fields, quotes[, edit]}], ``quotes[i]`` the
             exact text of ``fields[i]`` as it appears in the post (a substring of ``text``);
  unindexed: quotes of benchmark items NOT in data/evalsets (must not be flagged);
  pii:       [{type, value, expect: "replaced"|"kept"[, why]}], ``value`` a substring of ``text``;
  lookalikes: strings that look like PII but are not (versions, dates, ISBNs): kept.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
EVALSETS = REPO_ROOT / "data" / "evalsets"
NEGATIVES = REPO_ROOT / "bench" / "data" / "decontam"
OUT = REPO_ROOT / "data" / "sample" / "forum-posts.jsonl"

HALFWIDTH = str.maketrans({"．": ".", "（": "(", "）": ")", "，": ",", "：": ":", "；": ";",
                           "？": "?", "！": "!", "“": '"', "”": '"', "\u3000": " "})
FULLWIDTH_EN = [(", ", "，"), (". ", "。"), ("?", "？"), ("!", "！")]


def load(directory: Path, name: str) -> dict[str, dict]:
    with open(directory / f"{name}.jsonl", encoding="utf-8") as fh:
        return {rec["id"]: rec for rec in map(json.loads, fh)}


def halfwidth_punctuation(text: str) -> str:
    """Full-width punctuation to ASCII and the stray spaces of the PDF extraction
    removed (kept only between two ASCII letters or digits), as a reader retyping
    the question would write it."""
    text = text.translate(HALFWIDTH)
    text = re.sub(r"(?<![A-Za-z0-9]) +| +(?![A-Za-z0-9])", "", text)
    return text.strip()


def fullwidth_punctuation(text: str) -> str:
    """An English question as typed with a Chinese input method: full-width commas,
    full stops and question marks."""
    for ascii_, wide in FULLWIDTH_EN:
        text = text.replace(ascii_, wide)
    return text.strip()


def reformat_en(text: str) -> str:
    """Lower case, straight apostrophes, one sentence per line (a chat message)."""
    text = text.lower().replace("\u2019", "'")
    return re.sub(r"([.?]) +", r"\1\n", text).strip()


def reformat_zh_mcq(text: str) -> str:
    """The number and score dropped, stem and options on one line, options split by
    spaces and the options' full stops as ASCII dots ("A.法律..."): a copy from a
    phone screenshot."""
    text = re.sub(r"^\d+．（\s*\d+\s*分）", "", text.strip())
    text = re.sub(r"\s*\n\s*", " ", text)
    text = re.sub(r"([A-D])．", r"\1.", text)
    return re.sub(r"(?<=[^A-Za-z0-9 ]) (?=[^A-Za-z0-9 .])", "", text).strip()


def stem_only(text: str) -> str:
    """The stem without its options (everything before the line starting with ``A．``),
    the PDF line breaks and stray spaces removed."""
    stem = re.split(r"\n\s*A．", text, maxsplit=1)[0]
    return re.sub(r"(?<![A-Za-z0-9]) +| +(?![A-Za-z0-9])", "", stem.replace("\n", "")).strip()


def one_word(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, old
    return text.replace(old, new, 1).strip()


# ----------------------------------------------------------------------------------
# The posts. ``{0}``, ``{1}`` are the quotes, in the order of ``quotes``; a quote is
# (eval_set, item, fields, variant, transform or None, edit or None).

POSTS = [
    {
        "lang": "en",
        "title": "Is the textbook answer wrong?",
        "quotes": [("gsm8k", "829", ["question"], "verbatim", None, None)],
        "text": """Posted in Homework Help > Grade 4 Math

My daughter came home with this word problem and we have been arguing about it all evening. Here it is, copied straight from the worksheet:

{0}

She says 14,000 bars and I keep getting something else because I forgot that the first week counts too. The teacher's sheet just says "see answer key", which is not much help at 9 pm. Can somebody walk through it slowly? I would rather she understands why than just writes a number down. Thanks in advance, and sorry if this is the wrong subforum.

Reply from mathdad77: Add up the three weeks you know first (8,000 + 4,000 + 24,000), then subtract that from the month. The trap is the word "only" in the second week, kids read it as "only produces 8,000".""",
        "pii": [],
    },
    {
        "lang": "en",
        "title": "What a GSM8K solution looks like",
        "quotes": [("gsm8k", "638", ["question", "answer"], "verbatim", None, None)],
        "text": """I keep seeing people quote GSM8K scores without ever having looked at the data, so here is one test problem with its reference solution, exactly as it ships in the repository:

Question: {0}

Reference solution:
{1}

Two things to notice. The numbers in double angle brackets are calculator annotations: during training the model learns to emit them and a small calculator fills in the result. And the final answer always follows the four hash marks, which is what the evaluation script parses. If your model writes "$12.00" instead of "12", a strict parser will mark it wrong, which is one reason reported scores differ between papers by several points.

A third point people often miss is that the test split is small, only 1,319 problems, so one point of accuracy is about thirteen problems. When two models differ by less than that, I would not read much into the ranking, especially when the prompts and the number of worked examples shown before each question are not the same. Finally, the problems are written in plain everyday language about shops, families, farms and trips, which is exactly the kind of text that ends up in web crawls. That is why we check our training data for these questions before we train anything, and why we think every team that publishes a score should say how it checked.

Questions or corrections: write to j.miller@example.com, I answer on weekends.""",
        "pii": [{"type": "email", "value": "j.miller@example.com", "expect": "kept", "why": "documentation domain (RFC 2606), not a mailbox"}],
    },
    {
        "lang": "en",
        "title": "Tutoring notes, week 6",
        "quotes": [("gsm8k", "1217", ["question"], "one_word_changed", None, ("museum", "gallery"))],
        "text": """Tutoring notes, week 6. We spent most of the session on percentage increase, which is where my student keeps losing marks. I changed the setting of a problem from the practice book so that she would not recognise it:

{0}

She first computed 150% of $2 as the new price, which is the most common mistake: the increase is 150%, so the new price is $2 + $3 = $5, not $3. After that the rest was easy. Next week: ratios, and the dreaded "twice as many as" problems where the order of the two quantities matters. I will also bring the timing sheet, she is still slow on two-step problems but much more careful than in September.""",
        "pii": [],
    },
    {
        "lang": "en",
        "title": "chat log: overtime question",
        "quotes": [("gsm8k", "793", ["question"], "reformatted", reformat_en, None)],
        "text": """[19:02] sam_k: ok next one, my brother sent me this from his homework and im not sure about the overtime part
[19:02] sam_k: {0}
[19:04] lin: first 8 hours are normal pay, 20 times 8
[19:04] lin: then 3 hours at one and a half times the rate
[19:05] sam_k: so 30 an hour for those three?
[19:05] lin: yes, 90 plus 160
[19:06] sam_k: 250. nice, that matches what he got. thanks!!
[19:07] lin: np. tell him to write the units, teachers take points off for that""",
        "pii": [],
    },
    {
        "lang": "en",
        "title": "Why is this O(n^2) solution the accepted one?",
        "quotes": [("humaneval", "HumanEval_0", ["prompt", "canonical_solution"], "verbatim", None, None)],
        "text": """I'm going through the HumanEval problems to understand what the benchmark actually tests. The very first one is this (prompt and the reference solution, pasted as is):

```python
{0}
{1}
```

Isn't this quadratic? Sorting first and comparing neighbours would be O(n log n):

    numbers = sorted(numbers)
    return any(b - a < threshold for a, b in zip(numbers, numbers[1:]))

Is there a reason the canonical solution is written the slow way, or does nobody care because the tests only use lists of five or six elements?

Answer (accepted): the canonical solutions are only there to check that the tests are correct; they are not meant to be good code. Your version passes all the tests, the grader only runs check(candidate).""",
        "pii": [],
    },
    {
        "lang": "en",
        "title": "Phone screen question I got last week",
        "quotes": [("humaneval", "HumanEval_73", ["prompt"], "partial", lambda t: t.strip(), None)],
        "text": """Had a phone screen last week for a backend role. The interviewer pasted this into the shared editor and gave me 20 minutes:

{0}

I solved it with two pointers from both ends, counting the mismatched pairs, which is all it needs since changing one element of a pair fixes it. Later I found out it is a HumanEval problem word for word, so apparently interviewers use the benchmark too.

Unrelated, but if anyone from the meetup wants the slides: they are on my dev box at 192.168.1.23 on the office network, or on the public mirror at 58.33.12.7 until Friday.""",
        "pii": [{"type": "ip", "value": "192.168.1.23", "expect": "kept", "why": "private range (RFC 1918)"},
                {"type": "ip", "value": "58.33.12.7", "expect": "replaced"}],
    },
    {
        "lang": "zh",
        "title": "孩子的英文数学题求助",
        "quotes": [("gsm8k", "472", ["question"], "fullwidth_punctuation", fullwidth_punctuation, None)],
        "text": """孩子在国际学校读四年级，今天带回来一道英文应用题，我用手机打出来了，标点可能不太对：

{0}

我自己算出来是6根胡萝卜，但是孩子说老师讲的是8根，到底哪个对？我的思路是：先减去打扫房间奖励的两块饼干，剩下三块，再乘以二。请懂的家长帮忙看看，谢谢！着急的话也可以直接打我电话 +86-138-0013-8000，晚上八点以后都在。""",
        "pii": [{"type": "phone", "value": "+86-138-0013-8000", "expect": "replaced"}],
    },
    {
        "lang": "zh",
        "title": "一道历史选择题的讨论",
        "quotes": [("gaokao_mcq", "History-5", ["question"], "verbatim", None, None)],
        "text": """今天刷题遇到这道，原题复制如下：

{0}

我一开始选了B，觉得甲午战败以后中国才开始向日本学习。看了解析才明白，题干问的是“决定性因素”：19世纪中期是日本从中国引进新词，到20世纪初方向反过来，根本原因是日本通过明治维新学习西方取得了成效，中国才转而通过日本学习西学。甲午战败只是直接的刺激，所以答案是C，B只是诱因。做这类题一定要注意题干里的时间和“决定性”“根本”这类限定词，不然很容易被看起来也对的选项带偏。大家还有类似的题可以发上来一起讨论。

楼下回复：这道题我们老师也讲过，她说近代史的选择题经常把“直接原因”和“根本原因”放在一起让你选，平时复习的时候最好把每个重大事件的背景、原因和影响都整理成表格，这样考试的时候就不容易混了。

再楼下：我觉得这类题的难点在于材料给的信息很少，只说了新词传播的方向发生了变化，需要自己联系课本上学过的知识去解释为什么会变。我的办法是先想清楚材料里的变化是什么，再去想这个时间段里中国和日本分别发生了什么大事，这样就能把选项一个一个对上，而不是凭感觉去猜。""",
        "pii": [],
    },
    {
        "lang": "zh",
        "title": "生物错题整理",
        "quotes": [("gaokao_mcq", "Biology-19", ["question"], "halfwidth_punctuation", halfwidth_punctuation, None)],
        "text": """【错题整理】核酸部分，自己重新打了一遍：

{0}

答案C。错因：A选项我以为RNA都是单链所以没有氢键，其实tRNA的三叶草结构里就有碱基配对形成的氢键；B选项病毒只含一种核酸；D选项核糖体由rRNA和蛋白质组成，不含DNA。大肠杆菌是原核生物，酵母菌是真核生物，两者都同时有DNA和RNA，所以C对。下次再遇到“都”“只”“一定”这种绝对化的说法要多想一步。

总结一下这部分的知识点：DNA主要分布在细胞核中，线粒体和叶绿体里也有少量；RNA主要分布在细胞质中。核酸的种类和分布是每年必考的内容，我打算这周把课本上的相关段落再看一遍，顺便把以前做错的题目都重新做一次。

另外想问一下大家，你们的错题本是怎么整理的？我现在是把题目抄下来，再用红笔写错因和正确的思路，但是这样写得很慢，一道题要花十几分钟。有没有更高效的方法？听说有的同学是直接把卷子剪下来贴在本子上，然后只写错因，这样是不是会更好一些呢？

楼主补充：谢谢大家的建议。我试了一下剪贴的办法，确实快了很多，省下来的时间可以用来把同一类型的题目放在一起比较，看看它们到底是在考同一个知识点的哪个方面。我觉得这样复习的效果比以前一道一道地抄要好，等期中考试以后再来和大家汇报结果。""",
        "pii": [],
    },
    {
        "lang": "zh",
        "title": "宋代兵制小测",
        "quotes": [("gaokao_mcq", "History-205", ["question"], "one_word_changed", None, ("北宋", "南宋"))],
        "text": """班级群里老师发的课后小测，我照着抄下来，有一处可能抄错了朝代，大家凑合看：

{0}

我们组讨论的结果是A。募兵制下士兵是职业化的，由国家发饷，兵员越多财政负担越重，这也是后来“冗兵”“冗费”问题的来源。B和C都和史实相反，D说的是土地兼并的后果，和兵制关系不大。有同学问为什么不选B，因为职业兵虽然脱离生产，但宋代实行更戍法，兵将分离，战斗力反而不强。

老师最后补充说，这道题其实是改编自高考题，原题问的是北宋，我抄的时候看错了。不过不管是哪个朝代，考查的都是募兵制和财政负担之间的关系，大家复习的时候可以把宋代的“三冗”问题和王安石变法联系起来记。""",
        "pii": [],
    },
    {
        "lang": "zh",
        "title": "GDP到底算不算？",
        "quotes": [("gaokao_mcq", "Political_Science-145", ["question"], "partial", stem_only, None)],
        "text": """政治课上老师问了一个问题，我只记得题干，选项忘了：

{0}

老师说关键在“一定时期内所生产”和“一个国家（或地区）”两个条件：家务劳动没有进入市场不计入；古董是以前生产的，不是当期的产品；中国企业在国外生产的算在外国的GDP里，而外国企业在中国境内生产的要计入中国GDP。所以这个概念看的是地域，不是企业的国籍。我觉得这个点很容易考，和GNP一对比就清楚了。

后来查了一下课本，老师说的选项大概是：厨师在家做饭、商人买清代瓷器、中国企业在纽约的工厂、外国企业在武汉的工厂。按照上面的两个条件一个一个排除，只有最后一个是对的。有同学提出疑问，说外国企业赚的钱最后是外国人的，为什么还算中国的GDP，老师解释说这正是GDP和GNP的区别所在。

我回家以后又想了想，其实生活中很多事情都可以用这个概念来解释。比如说我们家楼下新开了一家外资的超市，它在这里卖东西、雇用这里的员工，它创造的价值就算在我们这里的生产总值里面。这样一想，这个概念就没有那么抽象了，也更容易记住。""",
        "pii": [],
    },
    {
        "lang": "zh",
        "title": "雅典陪审法庭",
        "quotes": [("gaokao_mcq", "History-190", ["question"], "reformatted", reformat_zh_mcq, None)],
        "text": """截图转的文字，格式有点乱，见谅：{0} 我选的C，结果错了。后来老师讲，雅典的公民大会和议事会的法令都可以被陪审法庭审查，说明最终的权力在作为陪审员的公民手里，体现的是权力的来源，也就是主权在民，所以选B。C的问题在于“全体公民”，陪审员是抽签产生的，不是全体公民都参与。A说“法律服从民众意愿”也太绝对了。这种题目要抓住材料的落脚点，而不是找一个看起来最正确的说法。""",
        "pii": [],
    },
    {
        "lang": "zh",
        "title": "高三历史二轮复习资料（世界现代史）",
        "quotes": [("gaokao_mcq", "History-212", ["question"], "verbatim", None, None),
                   ("gaokao_mcq", "History-223", ["question"], "verbatim", None, None)],
        "text": """各位同学，世界现代史二轮复习的两道例题如下，请先独立完成再看后面的分析。

例1：
{0}

例2：
{1}

分析：例1考查的是滞胀背景下国有化政策的效果，答案A；例2考查经济全球化背景下发展中国家维护经济安全的做法，答案C。

另外提醒：报名信息核对表里有同学把身份证号填错了，比如 110105199003071235 这一条系统校验不通过，请本人尽快到教务处更正；正确格式的示例为 110105199003071239（仅为示意）。有问题请致电教务处 (010) 6552 1234。""",
        "pii": [{"type": "cn_resident_id", "value": "110105199003071235", "expect": "kept", "why": "checksum invalid"},
                {"type": "cn_resident_id", "value": "110105199003071239", "expect": "replaced"},
                {"type": "phone", "value": "(010) 6552 1234", "expect": "replaced"}],
    },
    {
        "lang": "zh",
        "title": "出闲置语文教辅",
        "quotes": [("gaokao_mcq", "Chinese_Lang_and_Usage-37", ["question"], "verbatim", None, None)],
        "text": """出一套高考语文真题汇编，九成新，只在前几页写过字。给大家看看里面的一道题，感受一下难度：

{0}

这道题答案是C，A的“承蒙”是谦辞用错了对象，B的“高足”是敬称不能用于自己，D的“恭候”用在对方身上不得体。书里每道题都有这样的详细解析。

价格38元包邮（偏远地区除外），可以走支付宝或银行卡转账，卡号 6222 0200 1234 5671（工商银行）。联系电话 138 0013 8000，或发邮件到 wangfang@example.com，非诚勿扰。""",
        "pii": [{"type": "bank_card", "value": "6222 0200 1234 5671", "expect": "replaced"},
                {"type": "phone", "value": "138 0013 8000", "expect": "replaced"},
                {"type": "email", "value": "wangfang@example.com", "expect": "kept", "why": "documentation domain (RFC 2606), not a mailbox"}],
    },
    # -- Posts that quote nothing of the bundled eval sets (must not be flagged) --------
    {
        "lang": "zh",
        "title": "选择题答题技巧总结",
        "quotes": [],
        "text": """高考选择题的几个小技巧，都是自己做题总结的，不一定对，欢迎补充。

第一，先看设问。题干最后是“下列说法正确的是”还是“下列叙述错误的是（　　）”，一定要圈出来，很多人会做但选反了。第二，遇到“都”“一定”“只”“全部”这样的绝对化词语要警惕，一般是错误选项。第三，组合型选择题（①②③④）先排除一个明显错误的序号，能直接去掉两个选项。第四，材料题要找材料的落脚点，选项本身正确但与材料无关的也不能选。最后，答题卡上写“故选：D”之前再核对一遍题号，涂错行比做错题更可惜。""",
        "pii": [],
    },
    {
        "lang": "en",
        "title": "Writing GSM8K-style problems for a small eval",
        "quotes": [],
        "text": """For our internal eval we wanted problems in the style of GSM8K without copying any of them, so the team wrote 200 new ones. A few examples of the style:

Janet has 12 marbles. She gives a third of them to her cousin and buys 5 more at the fair. How many marbles does Janet have now?

A bakery sells muffins for $3 each and cookies for $1.50 each. On Saturday it sold 40 muffins and twice as many cookies. How much money did the bakery make on Saturday?

Each problem takes two to eight steps, uses only basic arithmetic, and ends with a single number. We also kept the "####" answer line so that the GSM8K parser works unchanged. The hard part was not writing the problems but checking them: two of us solved every problem independently and we threw away about 10% where we disagreed. Our models score about 6 points lower on our set than on the public test set, which suggests some leakage of the public problems into pretraining data.""",
        "pii": [],
    },
    {
        "lang": "en",
        "title": "Notes on running HumanEval locally",
        "quotes": [],
        "text": """Notes from setting up HumanEval on our cluster on 2024-03-15. We run Python 3.11.7 in a sandbox container, version 2.10.0 of our framework, and the harness from the official repository. A problem is a function signature with a docstring; the model writes the body, and the harness runs the hidden tests. For example, a problem in that style (written by us, not from the benchmark):

def count_vowels(word: str) -> int:
    \"\"\"Return the number of vowels in word.
    >>> count_vowels('banana')
    3
    \"\"\"

We report pass@1 with greedy decoding and pass@10 with temperature 0.8 over 20 samples, using the unbiased estimator from the Codex paper. Three practical notes: set a timeout per test (we use 3.0 seconds), never run the generated code outside the sandbox, and pin the harness commit, because the reported numbers move by a point or two between versions. The book we used for the background is ISBN 978-7-04-050906-9.""",
        "pii": [],
        "lookalikes": [{"kind": "date", "value": "2024-03-15"}, {"kind": "version", "value": "3.11.7"},
                       {"kind": "version", "value": "2.10.0"}, {"kind": "isbn", "value": "978-7-04-050906-9"}],
    },
    {
        "lang": "zh",
        "title": "自己出的一道生物题",
        "quotes": [],
        "text": """给学弟学妹出了一道练习题，仿照高考的格式，题目是我自己编的：

下列关于光合作用的叙述，正确的是（　　）
A．光反应只能在有光的条件下进行，暗反应只能在黑暗中进行
B．叶绿体中的色素主要吸收绿光，所以叶片呈绿色
C．光反应为暗反应提供ATP和NADPH
D．二氧化碳的固定发生在类囊体薄膜上

答案是C。A错在暗反应有光无光都能进行；B错在绿光几乎不被吸收，是被反射出来才使叶片呈绿色；D错在二氧化碳的固定发生在叶绿体基质中。大家做完可以在下面回复自己的答案和理由，周末我统一讲。""",
        "pii": [],
    },
    {
        "lang": "zh",
        "title": "一道没见过的细胞题",
        "quotes": [],
        "unindexed": [("gaokao_mcq", "Biology-16", ["question"])],
        "text": """今天的模拟卷里有一道题，我们班错了一大半，贴出来大家看看：

{u0}

正确答案是C。主动运输需要载体和能量，能量来自细胞呼吸，只有活细胞能进行；不同离子的载体数量不同，所以速率不同，A错；低温影响酶的活性进而影响呼吸供能，B错；叶肉细胞当然也能主动运输吸收离子，D错。""",
        "pii": [],
    },
    # -- A post that quotes nothing but carries personal data: the default build keeps it,
    # so its edits show in the pii tally of report.html (posts 01-14 are dropped whole).
    {
        "lang": "zh",
        "title": "小区业主群通知：快递代收和报修登记",
        "quotes": [],
        "text": """各位业主好，物业这周调整了快递代收和报修登记的办法，麻烦大家花两分钟看完。

一、快递代收。东门驿站从下周一起改到早上八点开门、晚上九点关门，超过三天没有取的包裹会退回。驿站负责人姓陈，电话 +8613900139000，有急事也可以打物业值班室 (021) 6123 4567。

二、报修登记。以前在群里发消息报修，经常被刷掉，现在统一发邮件到 baoxiu@hualin-wuye.cn（通知模板里的 demo@example.com 只是格式示例，不要往那里发），写清楚楼号、房号和问题，最好附一张照片。维修师傅上门前会先打电话确认时间。

三、门禁卡补办。补办需要本人身份证复印件，上周有位业主把身份证号 440306198805234123 直接发在群里，这样很不安全，已经请他撤回了，大家以后请私下交给物业。补卡费用二十元，可以转账到物业的银行卡 6217 0012 3456 7893，备注房号。

四、小区监控系统升级后，外网访问地址是 61.135.169.125，只对物业开放；楼内的路由器默认地址 10.0.0.8 不用改动。

有什么意见和建议，欢迎在群里留言，也可以在每月第一个周六上午到物业办公室当面反映。谢谢大家的配合！""",
        "pii": [{"type": "phone", "value": "+8613900139000", "expect": "replaced"},
                {"type": "phone", "value": "(021) 6123 4567", "expect": "replaced"},
                {"type": "email", "value": "baoxiu@hualin-wuye.cn", "expect": "replaced"},
                {"type": "email", "value": "demo@example.com", "expect": "kept", "why": "documentation domain (RFC 2606), not a mailbox"},
                {"type": "cn_resident_id", "value": "440306198805234123", "expect": "replaced"},
                {"type": "bank_card", "value": "6217 0012 3456 7893", "expect": "replaced"},
                {"type": "ip", "value": "61.135.169.125", "expect": "replaced"},
                {"type": "ip", "value": "10.0.0.8", "expect": "kept", "why": "private range (RFC 1918)"}],
    },
]


def build() -> list[dict]:
    evalsets = {name: load(EVALSETS, name) for name in ("gsm8k", "humaneval", "gaokao_mcq")}
    negatives = {name: load(NEGATIVES, f"{name}_negatives") for name in ("gsm8k", "humaneval", "gaokao_mcq")}
    records = []
    for number, post in enumerate(POSTS, start=1):
        quotes, planted = [], []
        for eval_set, item, fields, variant, transform, edit in post["quotes"]:
            rec = evalsets[eval_set][item]
            entry = {"eval_set": eval_set, "item": item, "variant": variant, "fields": fields, "quotes": []}
            for field in fields:
                text = rec[field]
                if edit is not None:
                    text = one_word(text, *edit)
                elif transform is not None:
                    text = transform(text)
                else:
                    text = text.strip("\n")
                quotes.append(text)
                entry["quotes"].append(text)
            if edit is not None:
                entry["edit"] = {"from": edit[0], "to": edit[1]}
            planted.append(entry)
        unindexed, unquotes = [], {}
        for k, (eval_set, item, fields) in enumerate(post.get("unindexed", [])):
            rec = negatives[eval_set][item]
            assert item not in evalsets[eval_set]
            unquotes[f"u{k}"] = "\n".join(rec[f].strip("\n") for f in fields)
            unindexed.append({"eval_set": eval_set, "item": item, "fields": fields,
                              "source": f"bench/data/decontam/{eval_set}_negatives.jsonl",
                              "quotes": [unquotes[f"u{k}"]]})
        text = post["text"].format(*quotes, **unquotes)
        for entry in planted:
            for quote in entry["quotes"]:
                assert quote in text, (number, entry["item"])
        for entry in post["pii"] + post.get("lookalikes", []):
            assert entry["value"] in text, (number, entry["value"])
        meta = {"orig_id": f"forum:{number:02d}", "label_lang": post["lang"], "title": post["title"],
                "author": "mindcorpus project", "licence": "CC0-1.0",
                "planted": planted, "unindexed": unindexed, "pii": post["pii"],
                "lookalikes": post.get("lookalikes", [])}
        records.append({"text": text, "meta": meta})
    return records


def main() -> None:
    records = build()
    with open(OUT, "w", encoding="utf-8", newline="\n") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    planted = sum(len(r["meta"]["planted"]) for r in records)
    print(f"{OUT.relative_to(REPO_ROOT)}: {len(records)} posts, {planted} planted quotes, "
          f"{OUT.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
