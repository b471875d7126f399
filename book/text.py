"""What the book itself says, in each of its three languages: its index, its captions and the notes it puts beside
what a static page cannot do. The notebooks' own prose and outputs are the notebooks' (and their translations',
docs/translating.md); these are the few lines the book adds around them.

The Bulgarian addresses the reader formally (пуснете), the Hungarian informally (futtasd), as the notebooks do."""

from __future__ import annotations

LANGUAGES = ("en", "bg", "hu")

# The language switch: each language named in itself.
NAMES = {"en": "English", "bg": "Български", "hu": "Magyar"}

TEXT: dict[str, dict[str, str]] = {
    "en": {
        "title": "Build an agent harness: the loop and its five exits",
        "short": "Agent harness: the companion",
        "search": "Search...",
        "sections": "Sections",
        "exercises": "Exercises",
        "glossary": "Glossary",
        "exercise": "Exercise",
        "languages": "This page in another language",
        "download": "Download the notebook",
        "exercise note": (
            "This is the exercise copy of [{section}]({target}): the same notebook with the piece the section "
            "builds left for you to write. Open it in JupyterLab (`make lab`, the folder `exercises`), write the piece "
            "where it says `# YOUR CODE HERE`, and run the check under it: it tells you which case of the chapter "
            "your piece gets wrong. On this page, the cells that need your piece say so where their output would be."),
        "stub": "Your code goes here; run it in JupyterLab: this cell needs the piece you write above.",
        "slider": ("A slider cannot move on this page: the plot is the one the notebook drew for its parameter's "
                   "value. Run the cell in JupyterLab (`make lab`) to move it."),
        "index": """\
The Python companion to the chapter: a small, readable agent harness and a scripted provider that together recompute
the chapter's figures, every token count, turn, status and dollar exactly. This book is its notebooks as they were
executed, with their outputs: read them here, then run them.

## How to use it

- Read the sections in order, 00 to 16: one notebook for each part of the chapter. The last one, 16, puts the
  pieces together into a harness of your own.
- Each section builds its piece of the harness in cells you can read. Its exercise leaves that piece for you to
  write, and a check tells you which case of the chapter your piece gets wrong.
- The glossary gives the chapter's terms in English, Bulgarian and Hungarian, with their names in the code.
- Every page links to the same page in the other two languages, and to its notebook, to download (at the top of
  the page).
- Nothing runs on these pages: the sliders do not move and Stop stops nothing. To run a notebook, change it and
  check your own code: the two commands below, then `make lab`.

## Two commands

```
make chapter   # create .venv, install, recompute the whole chapter (notebooks executed, into executed/)
make test      # create .venv, install, run every test, the notebooks' committed outputs included
```

Then `make lab` opens the notebooks in JupyterLab (`make lab NOTEBOOKS=bg` in Bulgarian, `NOTEBOOKS=hu` in
Hungarian), and `make book` builds this book.
""",
        "glossary intro": (
            "The chapter's terms as the English notebooks write them, their names in the code of `harness_lib`, and "
            "the words the Bulgarian and Hungarian notebooks use for them. Each language's own glossary says more: "
            "how the translations use them, and where in the chapter each notebook starts."),
        "glossary columns": "In the English notebooks | In the code | Bulgarian | Hungarian",
    },
    "bg": {
        "title": "Изградете agent harness: цикълът и петте му изхода",
        "short": "Agent harness: придружителят",
        "search": "Търсене...",
        "sections": "Раздели",
        "exercises": "Упражнения",
        "glossary": "Речник",
        "exercise": "Упражнение",
        "languages": "Тази страница на друг език",
        "download": "Изтеглете тетрадката",
        "exercise note": (
            "Това е копието за упражнения на [{section}]({target}): същата тетрадка, в която частта, която разделът "
            "изгражда, е оставена на вас. Отворете я в JupyterLab (`make lab NOTEBOOKS=bg`, папката `exercises`), "
            "напишете частта там, където пише `# YOUR CODE HERE`, и пуснете проверката под нея: тя казва кой случай "
            "от главата вашата част не минава. На тази страница клетките, които имат нужда от вашата част, го казват "
            "там, където би бил резултатът им."),
        "stub": "Тук е вашият код; пуснете го в JupyterLab: тази клетка има нужда от частта, която пишете по-горе.",
        "slider": ("Плъзгачът не може да се мести на тази страница: графиката е тази, която тетрадката е начертала "
                   "за стойността на параметъра си. Пуснете клетката в JupyterLab (`make lab NOTEBOOKS=bg`), за да "
                   "го местите."),
        "index": """\
Придружителят на главата на Python: малък, четим agent harness и scripted provider, които заедно изчисляват отново
числата на главата, всеки брой tokens, ход, статус и долар, точно. Тази книга са неговите тетрадки, така както са
изпълнени, с резултатите им: прочетете ги тук, после ги пуснете.

## Как да я четете

- Четете разделите по ред, от 00 до 16: по една тетрадка за всяка част от главата. Последната, 16, сглобява
  частите във ваш собствен harness.
- Всеки раздел изгражда своята част от harness-а в клетки, които можете да прочетете. Упражнението към него
  оставя тази част на вас, а проверката казва кой случай от главата вашата част не минава.
- Речникът дава термините на главата на български, на английски и имената им в кода.
- Всяка страница води към същата страница на другите два езика и към тетрадката си, за изтегляне (горе на
  страницата).
- На тези страници нищо не се изпълнява: плъзгачите не се местят, а Stop не спира нищо. За да пуснете тетрадка,
  да я промените и да проверите своя код: двете команди по-долу, после `make lab NOTEBOOKS=bg`.

## Две команди

```
make chapter   # create .venv, install, recompute the whole chapter (notebooks executed, into executed/)
make test      # create .venv, install, run every test, the notebooks' committed outputs included
```

После `make lab NOTEBOOKS=bg` отваря тетрадките на български в JupyterLab, а `make book` прави тази книга.
""",
    },
    "hu": {
        "title": "Agent harness építése: a loop és az öt kiútja",
        "short": "Agent harness: a kísérő",
        "search": "Keresés...",
        "sections": "Szakaszok",
        "exercises": "Feladatok",
        "glossary": "Szójegyzék",
        "exercise": "Feladat",
        "languages": "Ez az oldal más nyelven",
        "download": "A notebook letöltése",
        "exercise note": (
            "Ez a(z) [{section}]({target}) feladatos másolata: ugyanaz a notebook, de a darabot, amelyet a szakasz "
            "felépít, neked kell megírnod. Nyisd meg JupyterLabben (`make lab NOTEBOOKS=hu`, az `exercises` mappa), "
            "írd meg a darabot ott, ahol `# YOUR CODE HERE` áll, és futtasd alatta az ellenőrzést: megmondja, a "
            "fejezet melyik esetét rontja el a darabod. Ezen az oldalon azok a cellák, amelyeknek a te darabod kell, "
            "ezt írják ki oda, ahol a kimenetük lenne."),
        "stub": "Ide jön a te kódod; futtasd JupyterLabben: ennek a cellának a fenti darab kell, amelyet te írsz meg.",
        "slider": ("A csúszka ezen az oldalon nem mozdul: az ábra az, amelyet a notebook a paraméter értékéhez "
                   "rajzolt. Futtasd a cellát JupyterLabben (`make lab NOTEBOOKS=hu`), hogy mozgathasd."),
        "index": """\
A fejezet Python-kísérője: egy kicsi, olvasható agent harness és egy scriptelt provider, amelyek együtt újraszámolják
a fejezet számait, minden tokenszámot, turnt, státuszt és dollárt, pontosan. Ez a könyv a notebookjai úgy, ahogy
lefutottak, a kimeneteikkel együtt: itt olvasd el őket, aztán futtasd.

## Hogyan olvasd

- Olvasd a szakaszokat sorban, 00-tól 16-ig: a fejezet minden részéhez egy notebook tartozik. Az utolsó, a 16-os,
  a darabokat egy saját harnessbe rakja össze.
- Minden szakasz olyan cellákban építi fel a harness egy darabját, amelyeket elolvashatsz. A hozzá tartozó feladat
  ezt a darabot rád hagyja, és egy ellenőrzés megmondja, a fejezet melyik esetét rontja el a darabod.
- A szójegyzék a fejezet fogalmait adja magyarul, angolul és a kódbeli nevükkel.
- Minden oldal a másik két nyelv ugyanazon oldalára mutat, és a saját notebookjára, letöltésre (az oldal
  tetején).
- Ezeken az oldalakon semmi sem fut: a csúszkák nem mozdulnak, és a Stop semmit sem állít le. Ha futtatni,
  módosítani vagy a saját kódodat ellenőrizni akarod: az alábbi két parancs, aztán `make lab NOTEBOOKS=hu`.

## Két parancs

```
make chapter   # create .venv, install, recompute the whole chapter (notebooks executed, into executed/)
make test      # create .venv, install, run every test, the notebooks' committed outputs included
```

Utána `make lab NOTEBOOKS=hu` megnyitja a magyar notebookokat JupyterLabben, `make book` pedig ezt a könyvet építi fel.
""",
    },
}
