var a = "</b>\\n";
